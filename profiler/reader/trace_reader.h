// Decoding a trace image (a saved file's bytes, or a private copy of a live object). The reader
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

#include "profiler/format/trace_model.h"

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
  // open_shm() and open_file(): read at most this many bytes of the object, the header
  // included (private_copy.h, copy_limits: the sections these options ask for, in a fixed order;
  // what does not fit is cut or left out and trace_info::cut_sections says which). 0: the whole
  // trace, as large as its owner made it.
  std::uint64_t max_copy_bytes = 0;
  // Decode only the newest this many counter samples (0: all the ring holds).
  std::uint64_t max_samples = 0;
};

// Decodes a trace image (a saved file's bytes, or a copy of the object). `bytes` may be
// unaligned and may be concurrently modified by a writer (live mapping).
read_result decode(std::span<const std::byte> bytes, const read_options& = {});

} // namespace gmem::trace
