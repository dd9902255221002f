// Keeping and removing traces: a live object copied to a file in the trace format, a trace
// image written safely beside its target, an object removed (gmem save, GMEM_TRACE_SAVE,
// gmem clean).
#pragma once

#include <cstddef>
#include <span>
#include <string>

namespace gmem::trace {

// Copies a live object to `path` in the trace format (readable with open_file). Returns false
// and fills `error` on failure.
bool save_shm(const std::string& name, const std::string& path, std::string* error);

// Writes a trace image to `path` (via a temporary file that mkstemp creates 0600 beside it,
// fsync()ed and renamed over `path`; all-zero pages become holes). `snapshot`: the writer was still
// running (readers then report it as running, not crashed). Used by save_shm() and by the recorder
// for GMEM_TRACE_SAVE.
bool save_bytes(std::span<const std::byte> bytes, const std::string& path, bool snapshot,
                std::string* error);

// Removes the object (gmem clean). Returns false and fills `error` on failure.
bool remove_shm(const std::string& name, std::string* error);

} // namespace gmem::trace
