#include "tools/analysis/trace_facts.h"

#include <ctime>

namespace gmem::tools {

std::uint64_t unix_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t trace_now_ns(const gmem::trace::trace& t) {
  const auto& i = t.info;
  std::uint64_t wall = 0;
  if (i.exit_realtime_ns != 0) {
    wall = i.exit_realtime_ns;
  } else if (i.state == gmem::trace::trace_state::running && !i.saved_file) {
    wall = unix_now_ns();
  } else {
    wall = i.heartbeat_realtime_ns;
  }
  std::uint64_t now = wall > i.start_realtime_ns ? wall - i.start_realtime_ns : 0;
  // Never before the last thing recorded (clocks of a dead process may be stale).
  if (!t.events.empty() && t.events.back().time_ns > now) now = t.events.back().time_ns;
  for (const auto& a : t.live)
    if (a.time_ns > now) now = a.time_ns;
  return now;
}

std::vector<module_range> module_ranges(const gmem::trace::trace& t) {
  std::vector<module_range> m;
  for (const auto& mod : t.modules)
    m.push_back({mod.path, mod.load_bias, mod.size, mod.start, mod.build_id, false, {}});
  return m;
}

std::uint32_t symbolizer_uid(const gmem::trace::trace& t) {
  return t.info.owner_uid >= 0 && t.info.owner_uid <= 0xffffffff
             ? static_cast<std::uint32_t>(t.info.owner_uid)
             : symbolizer::k_nobody;
}

} // namespace gmem::tools
