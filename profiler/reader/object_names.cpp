#include "profiler/reader/object_names.h"

#include <cstdio>

namespace gmem::trace {

std::string object_name(std::uint32_t pid, std::uint64_t proc_start_ticks) {
  return "gmem." + std::to_string(pid) + "." + std::to_string(proc_start_ticks);
}

std::string object_name(std::uint32_t pid, std::uint64_t proc_start_ticks, std::uint64_t nonce) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce));
  return object_name(pid, proc_start_ticks) + "." + hex;
}

bool parse_object_name(const std::string& name, std::uint32_t* pid, std::uint64_t* ticks) {
  unsigned long long p = 0, t = 0;
  int used = 0;
  if (std::sscanf(name.c_str(), "gmem.%llu.%llu%n", &p, &t, &used) != 2 || p == 0 ||
      p > 0xffffffffull || name.find_first_of("+- ") != std::string::npos)
    return false;
  const auto rest = static_cast<std::size_t>(used);
  // Nothing more, or "." and exactly 16 lower-case hex digits (the recorder's random part).
  if (rest != name.size() &&
      (name.size() != rest + 17 || name[rest] != '.' ||
       name.find_first_not_of("0123456789abcdef", rest + 1) != std::string::npos))
    return false;
  *pid = static_cast<std::uint32_t>(p);
  *ticks = t;
  return true;
}

} // namespace gmem::trace
