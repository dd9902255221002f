// The trace objects and IPC registries in /dev/shm, found by name and fstatat(), and the
// light read (header, strings, counters) that `gmem ps` and retention need of each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/format/trace_model.h"

namespace gmem::trace {

// One trace object found in /dev/shm, without decoding it fully.
struct trace_entry {
  std::string name; // "gmem.<pid>.<ticks>"
  std::uint32_t pid = 0;
  std::uint64_t proc_start_ticks = 0;
  std::uint64_t bytes = 0;
  std::uint32_t uid = 0;    // the object's owner
  bool owner_known = false; // lstat worked
  trace_state state = trace_state::crashed;
  bool readable = false; // header decoded (false: other user's, other version, garbage)
  std::string problem;   // why not readable
  std::uint64_t start_realtime_ns = 0;
  std::uint64_t heartbeat_realtime_ns = 0;
  std::uint64_t exit_realtime_ns = 0;
  std::uint64_t exit_live_count = 0; // allocations outstanding at exit (exited traces)
  std::uint64_t allocated_bytes = 0; // /dev/shm space it holds (blocks, not its size)
  std::uint64_t mtime_ns = 0;        // last change of the object
  std::string command_line;
  // When the process stopped writing: its exit, else its last heartbeat, else the object's
  // last change.
  std::uint64_t ended_realtime_ns() const;
  std::uint64_t live_bytes = 0;     // summed over the pools' last counters
  std::uint64_t reserved_bytes = 0; // likewise
  std::uint64_t read_bytes = 0;     // bytes read_trace_entry() read of the object
};
// The most a light read (read_trace_entry) reads of one object, the header included: its
// counters, strings and module map up to this (the command line and stat names are among the
// first strings a writer stores); whatever the object's owner made it, a listing costs at most
// this per object.
inline constexpr std::uint64_t k_light_read_bytes = std::uint64_t{4} << 20;
// Bounds of one walk of /dev/shm, where any user can create entries (300,000 empty files named
// like traces cost an unbounded walk seconds): directory entries looked at, whatever their
// names, and time. The walk stops at either; `scan_stats` says whether it did.
struct scan_limits {
  std::uint64_t max_entries = ~std::uint64_t{0};
  std::uint64_t max_ns = 0; // 0 = no time limit
};
struct scan_stats {
  std::uint64_t entries = 0; // directory entries looked at
  bool cut = false;          // stopped at a limit: entries after them were not looked at
};
// Every gmem trace object on this host, oldest start first.
std::vector<trace_entry> list_traces();
// The same objects found by name and fstatat() only, none opened (in directory order; readable
// false, problem "not read"; name, pid, start ticks, owner, sizes and mtime filled): a caller
// that reads only some of them (the exporter, per user) chooses first, then read_trace_entry().
std::vector<trace_entry> stat_traces(const scan_limits& limits = {}, scan_stats* stats = nullptr);
// Fills in the rest of `e` as list_traces() does: a light read of the object (header, strings,
// counters: at most `max_bytes` of it, k_light_read_bytes), or the problem and whether its
// process runs.
void read_trace_entry(trace_entry& e, std::uint64_t max_bytes = k_light_read_bytes);

// The same as list_traces() over the objects `uid` owns (nobody else's is opened, read or
// counted); `*owner_bytes` receives the /dev/shm space that uid's objects hold, whatever their
// names. For retention.
std::vector<trace_entry> list_traces_of(std::uint32_t uid, std::uint64_t* owner_bytes,
                                        const scan_limits& limits = {},
                                        scan_stats* stats = nullptr);

// The registries of processes that exported CUDA IPC handles (interpose/ipc/ipc_sharing.h:
// /dev/shm/gmem-ipc.<pid>.<16 hex digits>, removed at exit, left behind by a SIGKILL), found by
// name and fstatat() only (never opened). `running`: the pid runs now as the object's owner;
// when it does not, the registry is of no use to anyone (its handles no longer open).
struct ipc_registry {
  std::string name; // "gmem-ipc.<pid>.<nonce>"
  std::uint32_t pid = 0;
  std::uint32_t uid = 0; // its owner
  bool running = false;
};
std::vector<ipc_registry> list_ipc_registries(const scan_limits& limits = {},
                                              scan_stats* stats = nullptr);

} // namespace gmem::trace
