// Retention of the traces of processes that are gone: what of /dev/shm they may hold
// (GMEM_TRACE_KEEP_MAX, _FREE, _AGE), planned purely and applied to the caller's own objects.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/options.h"
#include "common/units.h"
#include "profiler/reader/trace_listing.h"

namespace gmem::trace {

// Retention (GMEM_TRACE_KEEP_MAX, _FREE, _AGE): how much of /dev/shm the traces of processes
// that are gone may hold. Traces of running processes are never removed.
struct retention_policy {
  size_or_percent keep_max;      // together, at most this (of /dev/shm's size)
  size_or_percent keep_free;     // remove while less than this (of /dev/shm's size) is free
  std::uint64_t keep_age_ns = 0; // remove those that ended longer ago; 0 = no age limit
  static retention_policy from_options(const options& o);
};
struct shm_space {
  std::uint64_t total_bytes = 0; // size of the file system holding the traces
  std::uint64_t free_bytes = 0;  // space free in it now
};
shm_space shm_space_now(); // statvfs of /dev/shm; zeros when it cannot be read
struct retention_decision {
  bool evict = false;
  std::string reason; // "running", "kept: ...", "removed: older than 3d", ...
};
// One decision per entry (same order): oldest first, those past the age, then those over the
// size budget, then while /dev/shm has less free than asked. An end time after
// `now_realtime_ns` (a forged header or mtime, a clock set back) is not believed: that trace
// ranks as the oldest and does not age. Pure: tests drive it directly.
std::vector<retention_decision> plan_retention(const std::vector<trace_entry>& entries,
                                               const retention_policy& policy, shm_space space,
                                               std::uint64_t now_realtime_ns);
// plan_retention() applied to each owner's objects apart, /dev/shm (of `shm_total_bytes`)
// measured for each as if only that owner's objects were in it, as that owner's own jobs
// measure it: no user's objects, however many or whatever times they claim, can make another
// user's traces "removed". Objects of unknown owner are kept. For `gmem ps` and `gmem clean
// --expired` (root's --all-users included).
std::vector<retention_decision> plan_retention_by_owner(const std::vector<trace_entry>& entries,
                                                        const retention_policy& policy,
                                                        std::uint64_t shm_total_bytes,
                                                        std::uint64_t now_realtime_ns);
// How much of /dev/shm one pass of a traced job's retention looks at: directory entries
// (anybody's, named like traces or not) up to this many per walk (the traces, then the IPC
// registries), and this long for the whole pass, a quarter of which is kept for the registries
// however long the traces took. Past that the pass plans over what it saw: it may remove less,
// never more. `gmem clean --expired` is not bounded.
inline constexpr scan_limits k_retention_scan{65'536, 50'000'000};
// Plans and removes what the plan evicts among the caller's own objects (root's too: others'
// are left to `gmem clean --expired`), looking only at those: other users' objects are neither
// opened nor counted (/dev/shm's free space is taken as its size less the caller's objects),
// so no one else's files can make it remove or read anything. Also removes the caller's IPC
// registries whose process is gone. Each walk of /dev/shm stops at `limits.max_entries`, the
// pass at `limits.max_ns`. Returns the names removed.
// `spare`: an object name never removed (an exiting process's own trace).
std::vector<std::string> apply_retention(const retention_policy& policy,
                                         const std::string& spare = {},
                                         const scan_limits& limits = k_retention_scan);

} // namespace gmem::trace
