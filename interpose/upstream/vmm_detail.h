// What the three files of vmm_upstream (vmm_upstream.cpp: segments and peers; vmm_pages.cpp:
// arena pages; vmm_retire.cpp: retirement, spare pieces, teardown) share. Private to them.
#pragma once

#include <chrono>

#include "interpose/upstream/vmm_upstream.h"

namespace gmem::shim::vmm_detail {

inline CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

inline CUmemAccessDesc read_write(int device) {
  CUmemAccessDesc d = {};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

} // namespace gmem::shim::vmm_detail

namespace gmem::shim {

// attempt(rc) (map_vmm or extend_vmm) in the device's context, once more after waiting for
// retirements when the driver is out of memory; on success counts it and its time.
template <class Attempt>
std::uintptr_t vmm_upstream::retrying(Attempt attempt, std::uint64_t counters::*count,
                                      std::uint64_t counters::*ns, CUresult& rc) noexcept {
  ctx_scope scope(link_);
  const std::uint64_t start = vmm_detail::now_ns();
  std::uintptr_t va = attempt(rc);
  if (va == 0 && rc == CUDA_ERROR_OUT_OF_MEMORY) {
    reap(true); // retiring mappings and spare pieces still hold physical memory
    va = attempt(rc);
  }
  if (va == 0) return 0;
  {
    std::lock_guard lock(mu_);
    ++(count_.*count);
    count_.*ns += vmm_detail::now_ns() - start;
  }
  reap(false);
  return va;
}

} // namespace gmem::shim
