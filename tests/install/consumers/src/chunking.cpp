// A C++20 program planning chunks with gmem/chunking.hpp against a fixed budget (no GPU
// needed): 1000 items of 1 MiB in 100 MiB at the default 0.7 -> at most 70 items a chunk,
// balanced: 15 chunks of 67 (the last 62).
#include <gmem/chunking.hpp>

#include <cstdio>

int main() {
  gmem::chunk_options o;
  o.available_bytes = std::uint64_t{100} << 20;
  const gmem::chunk_plan p = gmem::plan_chunks(1000, std::uint64_t{1} << 20, o);
  std::printf("consumer: lang=c++20 chunk_items=%zu chunk_count=%zu\n", p.chunk_items,
              p.chunk_count);
  return p.chunk_count == 15 && p.chunk_items == 67 ? 0 : 1;
}
