// An allocation trace as the replay tool reads it: the program's allocations and frees in
// order, addresses replaced by dense ids. Text format, one event per line ('#' starts a
// comment line):
//   a <address hex> <bytes decimal> [<stream hex>]   an allocation
//   f <address hex>                                   a free of the live block at that address
// bench/workloads/torch_train.py --record-trace writes it from PyTorch's memory history.
// Frees of addresses not live in the trace (allocated before recording began) are skipped
// and counted; so is a second allocation at a live address (its old block is freed first).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gmem_bench {

struct trace_event {
  bool is_alloc = true;
  std::uint32_t id = 0;     // dense: the n-th allocation of the trace has id n
  std::size_t bytes = 0;    // allocations only
  std::uint64_t stream = 0; // allocations only; 0 = default stream
};

struct alloc_trace {
  std::vector<trace_event> events;
  std::uint32_t allocations = 0;   // number of ids
  std::size_t skipped_frees = 0;   // frees of addresses not live
  std::size_t implicit_frees = 0;  // allocations at a live address
  std::size_t peak_live_bytes = 0; // highest sum of live bytes
};

struct trace_error {
  std::size_t line = 0; // 1-based
  std::string message;
};

// Parses the text format. Returns the trace, or the first malformed line in `error`.
std::optional<alloc_trace> parse_trace(std::string_view text, trace_error& error);

// Reads and parses a file, plain or gzip-compressed; a missing file is reported as line 0.
std::optional<alloc_trace> read_trace(const std::string& path, trace_error& error);

} // namespace gmem_bench
