// A C++17 program using gmem's client API (gmem.h is a C header usable from C++).
#include <gmem/gmem.h>

#include <cstdint>
#include <cstdio>
#include <string_view>

int main() {
  std::uint64_t bytes = 0;
  const gmem_status s = gmem_allocatable_bytes(0, &bytes);
  const std::string_view name = gmem_status_name(s);
  std::printf("consumer: lang=c++17 available=%d allocatable=%.*s:%llu\n", gmem_available(),
              static_cast<int>(name.size()), name.data(), static_cast<unsigned long long>(bytes));
  return s == GMEM_OK ? 0 : 1;
}
