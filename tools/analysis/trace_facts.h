// Facts about a decoded trace that several reports need: its clock and its module map.
#pragma once

#include <cstdint>
#include <vector>

#include "profiler/format/trace_model.h"
#include "tools/symbolizer.h"

namespace gmem::tools {

// The wall clock now, in ns since the Unix epoch.
std::uint64_t unix_now_ns();

// "Now" on the trace's own clock (ns since recording began): the exit time of a process that
// exited, the last heartbeat of one that died, the current time for a running one.
std::uint64_t trace_now_ns(const gmem::trace::trace& t);

// The recorded module map, for the symbolizer.
std::vector<module_range> module_ranges(const gmem::trace::trace& t);
// Whose rights the symbolizer's child takes under a root reader (symbolizer::run_as): the
// owner of the object or file the trace was read from; nobody when unknown.
std::uint32_t symbolizer_uid(const gmem::trace::trace& t);

} // namespace gmem::tools
