// Device segments as virtual-memory mappings (cuMemCreate + cuMemAddressReserve + cuMemMap +
// cuMemSetAccess), so that giving a segment back never blocks the host.
//
// Why: cuMemFree waits until the whole device is idle. On the H200 a cuMemFree of an unrelated
// 2-128 MiB buffer took 200 ms behind a 200 ms kernel on another stream, while cuMemUnmap and
// cuMemRelease took 23-54 us (bench/probes/driver_facts.cu). A pool that reshapes its memory
// as request sizes change (PyTorch's varying sequence lengths: ~19 unmaps per training step)
// drained the GPU queue at every one of them.
//
// Safety: the pool unmaps a segment once all its blocks are free, and with barrier fences
// "free" means later work is ordered after the old owners' work, not that the old work has
// finished. So unmap() does not unmap: it retires the segment behind an event that completes
// after all work issued so far on every stream (a barrier, then a record on the legacy
// stream), and the mapping is torn down once that event has completed (queried, never waited
// for, at the next map or unmap). Until then its physical memory stays allocated.
// While the pool has a memory limit, map() first waits for retiring segments, so physical
// memory never exceeds the limit; the driver running out of memory also makes it wait, then
// retry.
//
// Sizes the VMM granularity does not divide (segments shrunk to fit a limit) and any VMM
// failure other than out-of-memory fall back to cuMemAlloc_v2 / cuMemFree_v2.
// Peer access: VMM memory is not covered by cuCtxEnablePeerAccess; grant() extends every
// mapping, present and future, to another device (the shim calls it from that hook).
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "interpose/driver_glue.h"

namespace gmem::shim {

class vmm_upstream final : public upstream {
public:
  // nullptr if this driver or device has no virtual memory management.
  static vmm_upstream* create(context_link& link, fences& fe);
  void attach(const pool* p) { pool_ = p; } // whose limit map() honours

  std::uintptr_t map(std::size_t bytes) noexcept override;
  void unmap(std::uintptr_t base, std::size_t bytes) noexcept override;
  void grant(int device) noexcept; // every mapping also readable and writable by `device`
  // cuCtxEnablePeerAccess succeeded: `device` may access the memory of context `owner`.
  // Remembered for pools created later; the caller grants it to an existing one.
  static void note_peer_access(CUcontext owner, int device);
  bool is_vmm(std::uintptr_t base) const noexcept; // a segment this upstream mapped by VMM
  std::size_t retiring_bytes() const noexcept;

private:
  vmm_upstream(context_link& link, fences& fe, std::size_t granularity);
  struct mapping {
    std::uintptr_t base = 0;
    std::size_t bytes = 0;
    CUmemGenericAllocationHandle handle = 0;
  };
  struct retiring {
    mapping m;
    event_handle done = 0; // 0: no event yet (a barrier was not possible): ask again later
  };
  std::uintptr_t map_vmm(std::size_t bytes, CUresult& rc) noexcept;
  void teardown(const mapping& m) noexcept; // unmap, release, free the range
  // Tears down retired segments whose event completed; with wait, all of them (a fence
  // first). Called without mu_.
  void reap(bool wait) noexcept;
  event_handle retire_event() noexcept;
  std::vector<CUmemAccessDesc> access_locked() const;

  context_link& link_;
  fences& fe_;
  device_upstream fallback_;
  const pool* pool_ = nullptr;
  const std::size_t granularity_;
  mutable std::mutex mu_; // guards everything below
  std::map<std::uintptr_t, mapping> live_;
  std::deque<retiring> retiring_; // in retirement order: events complete in this order
  std::size_t retiring_bytes_ = 0;
  std::vector<int> peers_;
};

} // namespace gmem::shim
