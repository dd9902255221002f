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
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "interpose/context_entry.h"
#include "interpose/trace_hooks.h"

namespace gmem::shim {

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

} // namespace gmem::shim
