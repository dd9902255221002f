#include "profiler/reader/trace_listing.h"

#include <algorithm>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <string_view>
#include <sys/stat.h>

#include "profiler/format/trace_clock.h"
#include "profiler/reader/object_names.h"
#include "profiler/reader/process_identity.h"
#include "profiler/reader/trace_open.h"

namespace gmem::trace {

namespace {

// One walk of /dev/shm against its limits: next() before each entry, false once past them.
// The clock is read every 256 entries (a fraction of a millisecond of fstatat() calls).
class bounded_walk {
public:
  explicit bounded_walk(const scan_limits& limits)
      : limits_(limits), deadline_(limits.max_ns != 0 ? monotonic_ns() + limits.max_ns : 0) {}
  bool next() {
    if (seen_.entries >= limits_.max_entries ||
        (deadline_ != 0 && (seen_.entries & 255) == 0 && monotonic_ns() >= deadline_)) {
      seen_.cut = true;
      return false;
    }
    ++seen_.entries;
    return true;
  }
  void report(scan_stats* stats) const {
    if (stats != nullptr) *stats = seen_;
  }

private:
  scan_limits limits_;
  std::uint64_t deadline_;
  scan_stats seen_;
};

// The trace objects in /dev/shm, by name and fstatat() only (nothing opened); with
// `only_owner`, only that uid's, and `*owner_bytes` receives the space that uid's objects hold,
// whatever their names.
std::vector<trace_entry> stat_traces_where(const std::uint32_t* only_owner,
                                           std::uint64_t* owner_bytes, const scan_limits& limits,
                                           scan_stats* stats) {
  std::vector<trace_entry> out;
  DIR* dir = opendir(k_shm_dir);
  if (!dir) return out;
  bounded_walk walk(limits);
  // Hard links: one object under several names is listed (and read) once, under its first
  // name in name order (ps, retention and the exporter count its bytes once).
  std::vector<std::pair<std::pair<dev_t, ino_t>, std::string>> linked;
  while (dirent* d = readdir(dir)) {
    if (!walk.next()) break;
    trace_entry e;
    e.name = d->d_name;
    if (only_owner != nullptr) {
      struct stat own {};
      if (::fstatat(dirfd(dir), d->d_name, &own, AT_SYMLINK_NOFOLLOW) != 0 ||
          own.st_uid != *only_owner)
        continue;
      if (S_ISREG(own.st_mode)) *owner_bytes += static_cast<std::uint64_t>(own.st_blocks) * 512;
    }
    if (!parse_object_name(e.name, &e.pid, &e.proc_start_ticks)) continue;
    struct stat st {};
    if (::fstatat(dirfd(dir), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      e.bytes = static_cast<std::uint64_t>(st.st_size);
      e.allocated_bytes = static_cast<std::uint64_t>(st.st_blocks) * 512;
      e.mtime_ns = static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ull +
                   static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
      e.uid = st.st_uid;
      e.owner_known = true;
      if (st.st_nlink > 1) linked.push_back({{st.st_dev, st.st_ino}, e.name});
    }
    e.problem = "not read";
    out.push_back(std::move(e));
  }
  closedir(dir);
  walk.report(stats);
  if (linked.size() > 1) {
    std::sort(linked.begin(), linked.end());
    std::vector<std::string> extra; // every name of an inode but its first
    for (std::size_t i = 1; i < linked.size(); ++i)
      if (linked[i].first == linked[i - 1].first) extra.push_back(linked[i].second);
    std::sort(extra.begin(), extra.end());
    std::erase_if(out, [&](const trace_entry& e) {
      return std::binary_search(extra.begin(), extra.end(), e.name);
    });
  }
  return out;
}

void sort_entries(std::vector<trace_entry>& out) {
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.start_realtime_ns != b.start_realtime_ns ? a.start_realtime_ns < b.start_realtime_ns
                                                      : a.name < b.name;
  });
}

std::vector<trace_entry> list_traces_where(const std::uint32_t* only_owner,
                                           std::uint64_t* owner_bytes, const scan_limits& limits,
                                           scan_stats* stats) {
  std::vector<trace_entry> out = stat_traces_where(only_owner, owner_bytes, limits, stats);
  for (trace_entry& e : out)
    read_trace_entry(e);
  sort_entries(out);
  return out;
}

} // namespace

std::vector<trace_entry> list_traces() {
  return list_traces_where(nullptr, nullptr, {}, nullptr);
}

std::vector<trace_entry> stat_traces(const scan_limits& limits, scan_stats* stats) {
  return stat_traces_where(nullptr, nullptr, limits, stats);
}

std::vector<trace_entry> list_traces_of(std::uint32_t uid, std::uint64_t* owner_bytes,
                                        const scan_limits& limits, scan_stats* stats) {
  return list_traces_where(&uid, owner_bytes, limits, stats);
}

void read_trace_entry(trace_entry& e, std::uint64_t max_bytes) {
  read_options light;
  light.events = light.samples = light.live = false;
  light.max_copy_bytes = max_bytes;
  std::uint32_t owner = 0;
  const read_result r = open_shm(e.name, light, &owner);
  // A refused object cost its first page at most (private_copy.h).
  e.read_bytes = r.value.info.copied_bytes != 0 ? r.value.info.copied_bytes
                                                : std::min<std::uint64_t>(e.bytes, 4096);
  e.readable = r.ok;
  if (r) {
    e.problem.clear();
    e.uid = owner;
    e.state = r.value.info.state;
    e.start_realtime_ns = r.value.info.start_realtime_ns;
    e.heartbeat_realtime_ns = r.value.info.heartbeat_realtime_ns;
    e.exit_realtime_ns = r.value.info.exit_realtime_ns;
    e.exit_live_count = r.value.info.exit_live_count;
    e.command_line = r.value.info.command_line;
    e.live_bytes = e.reserved_bytes = 0;
    for (const auto& dev : r.value.devices) {
      e.live_bytes += dev.stats.live_bytes;
      e.reserved_bytes += dev.stats.reserved_bytes;
    }
  } else {
    // "cannot open" has no byte offset worth showing; a decoding error has.
    e.problem = r.error.message.find(": cannot open the trace: ") != std::string::npos
                    ? r.error.message
                    : r.error.to_string();
    e.state = e.owner_known && alive_as(e.pid, e.proc_start_ticks, e.uid) ? trace_state::running
                                                                          : trace_state::crashed;
  }
}

std::vector<ipc_registry> list_ipc_registries(const scan_limits& limits, scan_stats* stats) {
  std::vector<ipc_registry> out;
  DIR* dir = opendir(k_shm_dir);
  if (!dir) return out;
  constexpr std::string_view k_prefix = "gmem-ipc.";
  bounded_walk walk(limits);
  while (dirent* d = readdir(dir)) {
    if (!walk.next()) break;
    const std::string_view name = d->d_name;
    // "gmem-ipc." digits "." 16 lower-case hex digits, nothing else.
    if (name.substr(0, k_prefix.size()) != k_prefix) continue;
    const std::size_t dot = name.find('.', k_prefix.size());
    if (dot == std::string_view::npos || dot == k_prefix.size() || dot - k_prefix.size() > 10 ||
        name.size() != dot + 17 || name.find_first_not_of("0123456789", k_prefix.size()) != dot ||
        name.find_first_not_of("0123456789abcdef", dot + 1) != std::string_view::npos)
      continue;
    const std::uint64_t pid =
        std::strtoull(std::string(name.substr(k_prefix.size())).c_str(), nullptr, 10);
    if (pid == 0 || pid > 0xffffffffu) continue;
    struct stat st {};
    if (::fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    ipc_registry r;
    r.name = name;
    r.pid = static_cast<std::uint32_t>(pid);
    r.uid = st.st_uid;
    std::uint32_t running_uid = 0;
    r.running = proc_uid(r.pid, &running_uid) && running_uid == r.uid;
    out.push_back(std::move(r));
  }
  closedir(dir);
  walk.report(stats);
  return out;
}

std::uint64_t trace_entry::ended_realtime_ns() const {
  if (exit_realtime_ns != 0) return exit_realtime_ns;
  if (readable && heartbeat_realtime_ns != 0) return heartbeat_realtime_ns;
  return mtime_ns;
}

} // namespace gmem::trace
