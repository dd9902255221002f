// The summary `gmem run` prints when the program ends: how it ended, per pool peak and live
// at exit (= leaks), cache hit rate, fences, OOMs, and where the trace is.
#pragma once

#include <cstdint>
#include <string>

#include "profiler/format/trace_model.h"

namespace gmem::tools {

// The process `gmem run` started, identified while it could not be reaped yet.
struct child_process {
  std::uint32_t pid = 0;
  std::uint64_t proc_start_ticks = 0; // /proc start time; 0 = unknown (then no trace is read)
  std::uint32_t uid = 0;              // the uid it ran as at the end
  std::string trace_save;             // GMEM_TRACE_SAVE in its environment ("" = none)
};

// Opens the trace `child` created (only that object: named after its pid and start time,
// owned by its uid) and formats it; says so when there is none. A GMEM_TRACE_SAVE file is
// reported as saved only when it is a regular file of the child's uid holding its trace.
std::string run_summary(const child_process& child, const std::string& program, int wait_status);

// Why the GMEM_TRACE_SAVE file at `path` is not the trace of `child` ("" when it is): not
// there, not a regular file (a symlink, a FIFO), owned by another uid, or another process's.
std::string check_saved_trace(const std::string& path, const child_process& child);

// Pure formatting (golden-tested). `t` may be null: `problem` then says why. `saved_ok`: the
// GMEM_TRACE_SAVE file was checked to hold this trace (else "trace saved to" is not printed).
std::string format_run_summary(const gmem::trace::trace* t, std::uint32_t pid,
                               const std::string& program, int wait_status,
                               const std::string& problem, bool saved_ok = true);

} // namespace gmem::tools
