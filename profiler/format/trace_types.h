// Small enums shared by the trace writer, the reader and the interposer's hooks. Their numeric
// values are part of the trace format (docs/trace-format.md): never renumber, only append.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pool/stats.h"

namespace gmem::trace {

// How an allocation reached us (which driver entry point), so reports can group by it.
enum class alloc_kind : std::uint8_t {
  device = 0,      // cuMemAlloc_v2 and friends, pooled
  async = 1,       // cuMemAllocAsync, pooled
  host_pinned = 2, // cuMemHostAlloc / cuMemAllocHost_v2, pooled
  managed = 3,     // cuMemAllocManaged, passed through
  pitched = 4,     // cuMemAllocPitch_v2
  vmm = 5,         // cuMemCreate / cuMemMap
  ipc = 6,         // cuIpcOpenMemHandle
  mempool = 7,     // cuMemAllocFromPoolAsync on an explicit pool
  capture = 8,     // graph memory: allocated by a capturing stream or a graph memory node
  passthrough = 9, // anything else handed straight to the driver
  // A block a framework's own caching allocator handed to the program (a PyTorch tensor, a
  // CuPy array), seen through the framework's allocation hooks (interpose/framework_observer.h),
  // not through the driver. It lies inside a segment the trace also holds under another kind
  // (the framework's cudaMalloc); readers count it and not that segment as the program's.
  tensor = 10,
};
inline constexpr std::uint8_t k_alloc_kind_count = 11;
const char* to_string(alloc_kind kind) noexcept; // "device", ...; "unknown" if out of range

// The key a live allocation is filed under in the writer's live table. A tensor starts where
// its segment does as often as not, so tensors are filed under the address with bit 63 set
// (no user-space address has it); readers see the published address, never the key.
constexpr std::uintptr_t live_key(std::uintptr_t address, alloc_kind kind) noexcept {
  return kind == alloc_kind::tensor ? address | (std::uintptr_t{1} << 63) : address;
}

// Frameworks whose allocators were observed per allocation (header flags, trace-format.md).
enum class observed_framework : std::uint8_t { pytorch = 0, cupy = 1 };
inline constexpr std::uint8_t k_observed_framework_count = 2;

// Event records in the ring (trace-format.md, "Event record").
enum class event_type : std::uint8_t {
  alloc = 1,
  free = 2,
  segment_map = 3,
  segment_unmap = 4,
  fence = 5,
  trim = 6,
  oom = 7,
  option = 8, // label = "GMEM_NAME=value"
  marker = 9, // label set by the program (client API) or the tool
};
inline constexpr std::uint8_t k_event_type_max = 9;
const char* to_string(event_type type) noexcept; // "alloc", ...; "unknown" if out of range

// Segment flags: a segment event's size2, and a live segment record's stream word.
inline constexpr std::uint64_t k_segment_stitched = 1; // a stitched range (pool_options::stitch)

// Why a counter sample was taken (sample ring).
enum class sample_reason : std::uint8_t {
  periodic = 0, // sampler thread, every GMEM_SAMPLE_MS
  oom = 1,      // the fragmentation snapshot of an OOM event
  final = 2,    // at shutdown()
};
inline constexpr std::uint8_t k_sample_reason_max = 2;
const char* to_string(sample_reason reason) noexcept;

// gmem's own host time observing a framework's tensors (lane words observed_*, format 5): what
// recording each costs the program, stacks included. All 0 when nothing was observed.
struct observe_cost {
  std::uint64_t allocs = 0, alloc_ns = 0; // allocations observed, and the time they took
  std::uint64_t frees = 0, free_ns = 0;
};

// How the trace's shared-memory file grew (GMEM_VERBOSE's "gmem: trace_growth" line): the page
// helper's growths, made ahead of the writer, the longest time any growth spent mapping its pages
// in (populate_max_ns), and the growths an
// allocating thread waited for (stalls: the first chunk of a section, or bytes the helper had
// not made yet or was making). All 0 without a trace.
struct trace_growth {
  std::uint64_t ahead = 0, ahead_bytes = 0, ahead_ns = 0, ahead_max_ns = 0, populate_max_ns = 0;
  std::uint64_t stalls = 0, stall_ns = 0, stall_max_ns = 0;
};

// One pool's counters, as the interposer's stats_source hands them to the recorder.
struct device_stats {
  int device; // CUdevice ordinal; host pools use -1
  pool_stats stats;
};

// Fills up to `max` entries of `out`, returns how many it filled. Called from the recorder's
// sampler thread every GMEM_SAMPLE_MS and at shutdown; must not call back into trace::.
using stats_source = std::size_t (*)(device_stats* out, std::size_t max) noexcept;

} // namespace gmem::trace
