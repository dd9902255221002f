// Reading traces: from bytes, from a saved file, from a live shared-memory object. The reader
// never trusts the bytes: every offset, count and length is checked, seqlocked records are read
// with bounded retries, and any malformed input becomes a read_error naming the byte offset.
// Nothing here asserts, throws across the API, or can hang on a writer killed mid-update.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/options.h"
#include "common/units.h"
#include "profiler/trace_model.h"

namespace gmem::trace {

struct read_error {
  std::uint64_t offset = 0;      // byte offset in the trace where the problem is
  std::string message;           // e.g. "trace format version 3, this gmem reads version 1"
  std::string to_string() const; // "byte 4096: <message>"
};

struct read_result {
  bool ok = false;
  trace value;      // valid when ok
  read_error error; // valid when !ok
  explicit operator bool() const { return ok; }
};

struct read_options {
  bool events = true;  // decode the event ring
  bool samples = true; // decode the counter sample ring
  bool live = true;    // decode the live allocation and segment tables
};

// Decodes a trace image (a saved file's bytes, or a copy of the object). `bytes` may be
// unaligned and may be concurrently modified by a writer (live mapping).
read_result decode(std::span<const std::byte> bytes, const read_options& = {});

// A saved trace file (gmem save, GMEM_TRACE_SAVE). Only a regular file is read (a FIFO or a
// device is refused without blocking), into a private copy: a file truncated or rewritten
// meanwhile cannot crash the reader.
read_result open_file(const std::string& path, const read_options& = {});

// The live object "gmem.<pid>.<ticks>" (name without "/dev/shm/"). Opened without following
// a symlink and without blocking, regular files only, decoded from a private copy (no SIGBUS
// when its owner truncates it). Refused when its header's pid or start time differ from the
// name's. It is "running" only when that process runs now as the object's owner.
read_result open_shm(const std::string& name, const read_options& = {});
// The same, and `*owner` receives the uid that owns the object this read copied (when it could
// be opened): whose trace it is, as no field of the trace can say.
read_result open_shm(const std::string& name, const read_options& options, std::uint32_t* owner);

// The object that belongs to `pid`, chosen without trusting anything another user writes:
// while `pid` runs, only the object named after its start time and owned by its uid (none else,
// an earlier process's included); once it is gone, the
// newest (by the name's start time, which must lie in the past) among the objects of one
// owner: the caller's own if it has any, else the only owner there is. Several owners and none
// of them the caller: ambiguous, refused with the names in `error`.
struct pid_object {
  std::string name;       // "" when none fits; then `error` may say why
  std::uint32_t uid = 0;  // its owner
  bool running = false;   // the object of the running process
  bool found_any = false; // some object carries this pid in its name
  std::string error;
};
pid_object find_pid_object(std::uint32_t pid);

// The object a known process created: named after `pid` and `proc_start_ticks` (its /proc
// start time, read while it ran or before it was reaped) and owned by `uid`. Nothing else,
// whatever other objects carry this pid (gmem run's summary of the child it started).
pid_object find_child_object(std::uint32_t pid, std::uint64_t proc_start_ticks, std::uint32_t uid);

// open_shm() of find_pid_object(pid).
read_result open_pid(std::uint32_t pid, const read_options& = {});

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
};
// Every gmem trace object on this host, oldest start first.
std::vector<trace_entry> list_traces();
// The same objects found by name and fstatat() only, none opened (in directory order; readable
// false, problem "not read"; name, pid, start ticks, owner, sizes and mtime filled): a caller
// that reads only some of them (the exporter, per user) chooses first, then read_trace_entry().
std::vector<trace_entry> stat_traces();
// Fills in the rest of `e` as list_traces() does: a light read of the object (header, strings,
// counters), or the problem and whether its process runs.
void read_trace_entry(trace_entry& e);

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
// size budget, then while /dev/shm has less free than asked. Pure: tests drive it directly.
std::vector<retention_decision> plan_retention(const std::vector<trace_entry>& entries,
                                               const retention_policy& policy, shm_space space,
                                               std::uint64_t now_realtime_ns);
// Plans and removes what the plan evicts among the caller's own objects (root's too: others'
// are left to `gmem clean --expired`), looking only at those: other users' objects are neither
// opened nor counted (/dev/shm's free space is taken as its size less the caller's objects),
// so no one else's files can make it remove or read anything. Also removes the caller's IPC
// registries whose process is gone. Returns the names removed.
// `spare`: an object name never removed (an exiting process's own trace).
std::vector<std::string> apply_retention(const retention_policy& policy,
                                         const std::string& spare = {});

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
std::vector<ipc_registry> list_ipc_registries();

// The /proc start time (field 22 of stat) and uid of `pid` while it runs or is a zombie not yet
// reaped. False when there is no such process.
bool proc_identity(std::uint32_t pid, std::uint64_t* proc_start_ticks, std::uint32_t* uid);

// Is the process that wrote `pid`/`proc_start_ticks` still the one running under that pid?
bool process_alive(std::uint32_t pid, std::uint64_t proc_start_ticks);
// The clock tick after the one /proc/uptime's text ("SECONDS.CC ...") is in, for `hz` ticks
// per second (sysconf(_SC_CLK_TCK); outside 1..10^6 counts as 100): no process of this boot has a
// start time (/proc/<pid>/stat field 22) at or past it. Unreadable text gives the largest value.
std::uint64_t ticks_after_uptime(std::string_view uptime, long hz);

// Copies a live object to `path` in the trace format (readable with open_file). Returns false
// and fills `error` on failure.
bool save_shm(const std::string& name, const std::string& path, std::string* error);

// Writes a trace image to `path` (via a temporary file that mkstemp creates 0600 beside it,
// fsync()ed and renamed over `path`; all-zero pages become holes). `snapshot`: the writer was still
// running (readers then report it as running, not crashed). Used by save_shm() and by the recorder
// for GMEM_TRACE_SAVE.
bool save_bytes(std::span<const std::byte> bytes, const std::string& path, bool snapshot,
                std::string* error);

// "gmem.<pid>.<proc_start_ticks>": the object name of a process.
std::string object_name(std::uint32_t pid, std::uint64_t proc_start_ticks);
// "gmem.<pid>.<ticks>.<nonce as 16 hex digits>": the name a recorder gives its object. The
// random part keeps another user from taking the name before the process creates it.
std::string object_name(std::uint32_t pid, std::uint64_t proc_start_ticks, std::uint64_t nonce);
// Parses such a name; false if `name` is not one.
// (either form: with or without the random part).
bool parse_object_name(const std::string& name, std::uint32_t* pid, std::uint64_t* ticks);

// Removes the object (gmem clean). Returns false and fills `error` on failure.
bool remove_shm(const std::string& name, std::string* error);

} // namespace gmem::trace
