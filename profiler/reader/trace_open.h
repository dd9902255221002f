// Opening traces: a saved file or a live shared-memory object, each read into a private copy
// (private_copy.h) and decoded (trace_reader.h).
#pragma once

#include <cstdint>
#include <string>

#include "profiler/reader/trace_reader.h"

namespace gmem::trace {

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

} // namespace gmem::trace
