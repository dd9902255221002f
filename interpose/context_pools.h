// One pool per CUDA context (plus one pinned-host pool per context and cuMemHostAlloc flag
// set), found by the current context with a per-thread cache in front.
//
// Entries are append-only and never freed: a thread may hold one while another drops it, and
// pools must outlive every hook (exit, see shim_state.h). Dropping (context destroyed,
// primary context reset or released) marks the entry dropped and abandons its pools: the
// driver has already released their memory. Invariant: at most one live (not dropped) entry
// per CUcontext value; g_generation changes whenever an entry is dropped, which invalidates
// every thread's cache.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "interpose/backends/driver_glue.h"
#include "interpose/backends/vmm_upstream.h"
#include "interpose/trace_hooks.h"

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

class context_pools {
public:
  static constexpr std::size_t k_max_entries = 256;

  // The entry of the calling thread's current context, created on first use; nullptr when no
  // context is current (the driver then gives the caller its own error).
  context_entry* current(const real_driver& real);
  // The entry this thread used last, without asking the driver (frees need no context);
  // nullptr when none or when it was dropped since.
  context_entry* last_used() const;
  // Like current(), but never creates one.
  context_entry* find_current(const real_driver& real);
  // The live entry of `ctx`, or nullptr.
  context_entry* find(CUcontext ctx) const;
  // The pinned-host pool of `entry` for `flags`, created on first use; nullptr when all
  // slots are taken (the caller passes through).
  pool* host_pool(context_entry& entry, unsigned flags);
  // The live entry whose device pool (host: one of its host pools) owns `address`. `hint` is
  // tried first.
  context_entry* device_owner(std::uintptr_t address, context_entry* hint) const;
  pool* host_owner(std::uintptr_t address, int* device) const;

  void drop(CUcontext ctx);                               // cuCtxDestroy
  void drop_primary(const real_driver& real, int device); // primary reset / last release

  // Calls f(entry) for every live entry.
  template <typename F> void for_each(F&& f) const {
    const std::size_t n = count_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i) {
      context_entry* e = entries_[i];
      if (!e->dropped()) f(*e);
    }
  }
  // Calls f(entry) for every entry, dropped ones included (their pools are never freed).
  template <typename F> void for_each_entry(F&& f) const {
    const std::size_t n = count_.load(std::memory_order_acquire);
    for (std::size_t i = 0; i < n; ++i)
      f(*entries_[i]);
  }
  // Every pool's figures per device, dropped pools included (retired_pools.h).
  std::size_t fill_stats(trace::device_stats* out, std::size_t max) const;

private:
  context_entry* create_locked(const real_driver& real, CUcontext ctx);
  mutable std::mutex mu_; // serializes creation and dropping; readers take no lock
  std::array<context_entry*, k_max_entries> entries_{};
  std::atomic<std::size_t> count_{0}; // entries_[0, count_) are published
};

context_pools& pools(); // the process's instance (never destroyed)

// Is `ctx` (current, on `device`) the device's primary context? An inactive primary context is
// not created to find out.
bool is_primary_context(const real_driver& real, CUcontext ctx, int device);

} // namespace gmem::shim
