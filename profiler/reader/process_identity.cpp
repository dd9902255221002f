#include "profiler/reader/process_identity.h"

#include <fstream>
#include <iterator>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace gmem::trace {

std::uint64_t proc_start_ticks(std::uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::size_t pos = paren + 2;
  for (int field = 3; field < 22; ++field) {
    pos = text.find(' ', pos);
    if (pos == std::string::npos) return 0;
    ++pos;
  }
  return std::strtoull(text.c_str() + pos, nullptr, 10);
}

std::uint64_t ticks_after_uptime(std::string_view uptime, long hz) {
  // Whole numbers, not a double: 1234.57 x 100 is 123456.99999999999 as doubles, one tick
  // short, and a process that started in the current tick would then look as if it started
  // in the future (its trace refused as not its own).
  if (hz <= 0 || hz > 1'000'000) hz = 100;
  std::uint64_t seconds = 0, fraction_ns = 0, scale = 1'000'000'000;
  std::size_t i = 0;
  for (; i < uptime.size() && uptime[i] >= '0' && uptime[i] <= '9'; ++i)
    seconds = seconds * 10 + static_cast<std::uint64_t>(uptime[i] - '0');
  if (i == 0 || i > 12) return ~std::uint64_t{0}; // none, or beyond 30,000 years
  if (i < uptime.size() && uptime[i] == '.')
    for (++i; i < uptime.size() && uptime[i] >= '0' && uptime[i] <= '9' && scale > 1; ++i) {
      scale /= 10;
      fraction_ns += static_cast<std::uint64_t>(uptime[i] - '0') * scale;
    }
  const auto per_second = static_cast<std::uint64_t>(hz);
  return seconds * per_second + fraction_ns * per_second / 1'000'000'000 + 1;
}

bool process_alive(std::uint32_t pid, std::uint64_t ticks) {
  return pid != 0 && proc_start_ticks(pid) == ticks && ticks != 0;
}

bool proc_uid(std::uint32_t pid, std::uint32_t* uid) {
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0) return false;
  *uid = st.st_uid;
  return true;
}

bool alive_as(std::uint32_t pid, std::uint64_t ticks, std::uint32_t uid) {
  std::uint32_t running_uid = 0;
  return process_alive(pid, ticks) && proc_uid(pid, &running_uid) && running_uid == uid;
}

std::uint64_t ticks_now() {
  std::ifstream f("/proc/uptime");
  std::string text;
  if (!(f >> text)) return ~std::uint64_t{0};
  return ticks_after_uptime(text, ::sysconf(_SC_CLK_TCK));
}

bool proc_identity(std::uint32_t pid, std::uint64_t* ticks, std::uint32_t* uid) {
  *ticks = proc_start_ticks(pid);
  return *ticks != 0 && proc_uid(pid, uid);
}

} // namespace gmem::trace
