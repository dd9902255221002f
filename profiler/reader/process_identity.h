// Processes as /proc shows them: a pid's start time and owner, whether the process that wrote
// a trace is the one running under its pid now, and the clock ticks of this boot.
#pragma once

#include <cstdint>
#include <string_view>

namespace gmem::trace {

// The /proc start time (field 22 of stat) and uid of `pid` while it runs or is a zombie not yet
// reaped. False when there is no such process.
bool proc_identity(std::uint32_t pid, std::uint64_t* proc_start_ticks, std::uint32_t* uid);

// Is the process that wrote `pid`/`proc_start_ticks` still the one running under that pid?
bool process_alive(std::uint32_t pid, std::uint64_t proc_start_ticks);
// The clock tick after the one /proc/uptime's text ("SECONDS.CC ...") is in, for `hz` ticks
// per second (sysconf(_SC_CLK_TCK); outside 1..10^6 counts as 100): no process of this boot has a
// start time (/proc/<pid>/stat field 22) at or past it. Unreadable text gives the largest value.
std::uint64_t ticks_after_uptime(std::string_view uptime, long hz);

// /proc/<pid>/stat field 22 (start time in clock ticks since boot); 0 when there is no such
// process.
std::uint64_t proc_start_ticks(std::uint32_t pid);
// The uid that owns /proc/<pid>, or false when there is no such process.
bool proc_uid(std::uint32_t pid, std::uint32_t* uid);
// Is the process of (pid, ticks) running now, as `uid`? An object someone else created under
// a running process's name is not that process's trace.
bool alive_as(std::uint32_t pid, std::uint64_t ticks, std::uint32_t uid);
// Clock ticks since boot now, plus one: no process on this boot started at or after it.
std::uint64_t ticks_now();

} // namespace gmem::trace
