// Which trace object is a process's, when only its pid is given, trusting nothing another user
// can write (object names and start times are chosen by whoever creates them).
#pragma once

#include <cstdint>
#include <string>

#include "profiler/reader/trace_reader.h"

namespace gmem::trace {

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

} // namespace gmem::trace
