// Per-tensor observation of a framework's own caching allocator: what PyTorch's trace tracker
// hands us, decoded without PyTorch's headers, and the check that decides whether to believe
// it. interpose/framework_observer.cpp attaches the tracker and records what this accepts.
//
// PyTorch's CUDACachingAllocator calls each attached tracker, on the allocating thread with
// its own mutex held, with a TraceEntry for every block it hands out (ALLOC) and takes back
// (FREE_REQUESTED, FREE_COMPLETED), and for its segments. gmem is built without PyTorch, so the
// TraceEntry's layout and the vtable slot of attachAllocatorTraceTracker come from a table of
// verified rows keyed by PyTorch's version (python/gmem_bootstrap/sitecustomize.py; a row is
// derived by scripts/torch_layout.cpp), handed over as a torch_layout. Nothing here calls the
// framework: decoding reads bytes at checked offsets.
//
// Trust: a layout that is wrong for the PyTorch in the process shows as garbage in the first
// events (an action out of range, a device out of range, a null address, a size of 0, an
// address outside the memory the shim handed out). sanity_gate checks the first
// k_checked_events events; the first violation turns observation off for good.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gmem::trace {

// The layout descriptor the bootstrap passes through the C entry gmem_observe_torch_attach
// (interpose/framework_observer.h). Version 1; every field is checked by validate().
struct torch_layout {
  std::uint32_t struct_bytes;  // sizeof(torch_layout): the caller's idea of this struct
  std::uint32_t version;       // k_torch_layout_version
  std::uint32_t attach_slot;   // vtable slot of CUDAAllocator::attachAllocatorTraceTracker
  std::uint32_t entry_bytes;   // sizeof(TraceEntry)
  std::uint32_t action_offset; // int32 TraceEntry::action_
  std::uint32_t device_offset; // int8 device_
  std::uint32_t addr_offset;   // size_t addr_
  std::uint32_t stream_offset; // cudaStream_t stream_
  std::uint32_t size_offset;   // size_t size_
  std::int32_t action_alloc;   // Action::ALLOC
  std::int32_t action_free;    // Action::FREE_REQUESTED (the program's free)
  std::int32_t action_max;     // the largest Action value (OOM)
  std::uint32_t flags;         // k_check_owner
  std::uint32_t reserved;
};
inline constexpr std::uint32_t k_torch_layout_version = 1;
// ALLOC addresses must lie in memory the shim's pools handed out (off with expandable
// segments, which PyTorch maps itself through cuMemMap).
inline constexpr std::uint32_t k_check_owner = 1;
static_assert(sizeof(torch_layout) == 56);

// "" when `l` is usable, else what is wrong (one phrase, for the warning line).
std::string validate(const torch_layout& l);

struct observed_event {
  enum class what : std::uint8_t { alloc, free, other };
  what type = what::other;
  std::int32_t action = 0;
  int device = 0;
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::uintptr_t stream = 0;
};

// Reads one TraceEntry laid out as `l` (validated) at `entry`.
observed_event decode(const torch_layout& l, const void* entry) noexcept;

// Devices a sane event may name: CUDA's ordinals are small; PyTorch stores them in an int8.
inline constexpr int k_max_observed_devices = 64;

// The first k_checked_events events must look like allocations; after that, each event costs
// one relaxed load. With an owner check, the first k_owner_probes blocks must not all lie
// outside gmem's pools (one inside is enough: blocks of CUDA graph pools, allocated while a
// stream captures, come from the driver directly). Thread-safe: trackers run on every
// allocating thread.
class sanity_gate {
public:
  static constexpr std::uint32_t k_checked_events = 64;
  static constexpr std::uint32_t k_owner_probes = 8;
  // owner(address) says whether the shim handed out memory containing `address`; nullptr: not
  // checked.
  using owner_fn = bool (*)(std::uintptr_t address) noexcept;

  // true: record `e`. false: drop it; when this call turned the gate off, *why says why (the
  // caller prints it once), else *why is left alone.
  bool admit(const observed_event& e, std::int32_t action_max, owner_fn owner,
             std::string* why) noexcept;
  bool open() const noexcept { return !closed_.load(std::memory_order_relaxed); }
  std::uint32_t checked() const noexcept { return checked_.load(std::memory_order_relaxed); }

private:
  std::atomic<bool> closed_{false};
  std::atomic<std::uint32_t> checked_{0};
  std::atomic<std::uint32_t> owned_{0};
  std::atomic<std::uint32_t> foreign_{0};
};

// The violation of one event's fields, or "" (exposed for tests).
std::string check_event(const observed_event& e, std::int32_t action_max);

} // namespace gmem::trace
