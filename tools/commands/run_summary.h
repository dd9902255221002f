// The summary `gmem run` prints when the program ends: how it ended, per pool peak and live
// at exit (= leaks), cache hit rate, fences, OOMs, and where the trace is.
#pragma once

#include <cstdint>
#include <string>

#include "profiler/trace_model.h"

namespace gmem::tools {

// Opens the trace of `pid` and formats it; says so when there is none.
std::string run_summary(std::uint32_t pid, const std::string& program, int wait_status);

// Pure formatting (golden-tested). `t` may be null: `problem` then says why.
std::string format_run_summary(const gmem::trace::trace* t, std::uint32_t pid,
                               const std::string& program, int wait_status,
                               const std::string& problem);

} // namespace gmem::tools
