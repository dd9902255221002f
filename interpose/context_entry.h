// One CUDA context's pools as context_pools (context_pools.h) keeps them: the device pool over
// its upstream and fences, and up to k_max_host_pools pinned-host pools, one per
// cuMemHostAlloc flag set. Entries are never freed; a dropped one keeps its figures.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>

#include "interpose/upstream/driver_glue.h"
#include "interpose/upstream/vmm_upstream.h"
#include "pool/pool.h"

namespace gmem::shim {

struct host_pool_slot {
  unsigned flags = 0;
  host_upstream* upstream = nullptr;
  pool* host_pool = nullptr;
};

struct context_entry {
  context_link link;
  bool primary = false; // the device's primary context (runtime programs use only these)
  driver_fences* fences = nullptr;
  device_upstream* upstream = nullptr; // cuMemAlloc segments (GMEM_VMM=0, or no VMM)
  vmm_upstream* vmm = nullptr;         // otherwise: virtual-memory segments
  trace_observer* observer = nullptr;
  pool* device_pool = nullptr;
  static constexpr std::size_t k_max_host_pools = 8;
  std::array<host_pool_slot, k_max_host_pools> host{};
  std::atomic<std::size_t> host_count{0}; // slots [0, host_count) are published
  // Written once before `dropped` is set (retired_pools.h): the pools' figures at the drop.
  const char* drop_reason = nullptr; // "destroyed", "reset"
  pool_stats device_at_drop;
  std::array<pool_stats, k_max_host_pools> host_at_drop{};

  bool dropped() const { return link.dropped.load(std::memory_order_acquire); }
  int device() const { return link.device; }
};

} // namespace gmem::shim
