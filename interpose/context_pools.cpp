#include "interpose/context_pools.h"

#include <cstdio>

#include "common/options.h"
#include "common/units.h"
#include "interpose/retired_pools.h"
#include "interpose/shim_state.h"

namespace gmem::shim {

// gmem_set_limit() for pools not created yet (interpose/hooks/client_api.cpp); weak so the shim
// links without the client API.
__attribute__((weak)) bool client_limit_override(int device, std::uint64_t* bytes);

namespace {

std::atomic<std::uint64_t> g_generation{1};
thread_local CUcontext t_ctx __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local context_entry* t_entry __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local std::uint64_t t_generation __attribute__((tls_model("initial-exec"))) = 0;

pool_options device_pool_options(const real_driver& real, int device) {
  const options& o = shim_options();
  pool_options p;
  if (o.limit_set) {
    std::size_t total = 0;
    if (o.limit.is_percent && real.cuDeviceTotalMem_v2 != nullptr) {
      (void)real.cuDeviceTotalMem_v2(&total, device);
    }
    p.limit_bytes = o.limit.resolve(total);
  }
  if (std::uint64_t bytes = 0;
      client_limit_override != nullptr && client_limit_override(device, &bytes)) {
    p.limit_bytes = bytes;
  }
  if (o.max_cached_set && o.max_cached != 0) p.max_cached_bytes = o.max_cached;
  if (o.small_segment_set && o.small_segment != 0) p.small_segment_bytes = o.small_segment;
  if (o.large_segment_set && o.large_segment != 0) p.large_segment_bytes = o.large_segment;
  if (o.small_max_set && o.small_max != 0) p.small_max_bytes = o.small_max;
  if (o.oversize_set && o.oversize != 0) p.oversize_bytes = o.oversize;
  p.warmup_bytes = o.warmup;
  std::size_t device_bytes = 0;
  if ((o.warmup != 0 || (p.limit_bytes != 0 && o.limit.is_percent)) &&
      real.cuDeviceTotalMem_v2 != nullptr &&
      real.cuDeviceTotalMem_v2(&device_bytes, device) == CUDA_SUCCESS && device_bytes != 0) {
    if (o.warmup > device_bytes) {
      options::warn_once("gmem: warning: GMEM_WARMUP=" + format_bytes(o.warmup) +
                         " is more "
                         "than device " +
                         std::to_string(device) + "'s " + format_bytes(device_bytes) +
                         "; no warm-up on that device");
      p.warmup_bytes = 0;
    }
    if (o.limit.is_percent && p.limit_bytes < options::k_min_limit) {
      options::warn_once("gmem: warning: GMEM_LIMIT=" + std::to_string(o.limit.percent) +
                         "% is below 1 MiB on device " + std::to_string(device) +
                         ": every allocation would fail; no limit on that device");
      p.limit_bytes = 0;
    }
  }
  p.reuse_safety = o.reuse_safety;
  p.barriers = o.barriers; // device memory: only device work touches it
  p.marks = o.fence_marks;
  return p;
}

void abandon_entry(context_entry& e) {
  e.link.dropped.store(true, std::memory_order_release);
  e.device_pool->abandon();
  const std::size_t n = e.host_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i)
    e.host[i].host_pool->abandon();
}

} // namespace

context_pools& pools() {
  static context_pools* p = new context_pools; // never destroyed: hooks run during exit
  return *p;
}

context_entry* context_pools::current(const real_driver& real) {
  CUcontext ctx = nullptr;
  if (real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return nullptr;
  if (GMEM_LIKELY(ctx == t_ctx && t_generation == g_generation.load(std::memory_order_acquire))) {
    return t_entry;
  }
  const std::uint64_t generation = g_generation.load(std::memory_order_acquire);
  context_entry* e = find(ctx);
  if (e == nullptr) {
    std::lock_guard lock(mu_);
    e = find(ctx);
    if (e == nullptr) e = create_locked(real, ctx);
  }
  if (e != nullptr) {
    t_ctx = ctx;
    t_entry = e;
    t_generation = generation;
  }
  return e;
}

context_entry* context_pools::last_used() const {
  return t_generation == g_generation.load(std::memory_order_acquire) ? t_entry : nullptr;
}

context_entry* context_pools::find_current(const real_driver& real) {
  CUcontext ctx = nullptr;
  if (real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) return nullptr;
  if (ctx == t_ctx && t_generation == g_generation.load(std::memory_order_acquire)) return t_entry;
  return find(ctx);
}

context_entry* context_pools::find(CUcontext ctx) const {
  const std::size_t n = count_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    context_entry* e = entries_[i];
    if (e->link.ctx == ctx && !e->dropped()) return e;
  }
  return nullptr;
}

// Called with mu_ held and `ctx` current on this thread. The pool's warm-up calls the driver
// under mu_; the driver never calls back into a hook that takes mu_.
context_entry* context_pools::create_locked(const real_driver& real, CUcontext ctx) {
  const std::size_t n = count_.load(std::memory_order_relaxed);
  if (n == k_max_entries) return nullptr;
  CUdevice device = 0;
  if (real.cuCtxGetDevice(&device) != CUDA_SUCCESS) return nullptr;
  auto* e = new context_entry;
  e->link.real = &real;
  e->link.ctx = ctx;
  e->link.device = device;
  e->primary = is_primary_context(real, ctx, device);
  e->fences = new driver_fences(e->link);
  e->observer = new trace_observer(device);
  const options& opt = shim_options();
  if (opt.vmm || opt.arena) {
    // Stitching maps whole free pages: the driver's 2 MiB unless the page is set explicitly.
    const std::uint64_t mb = opt.stitch && !opt.arena_page_mb_set ? 2 : opt.arena_page_mb;
    const std::size_t page = opt.arena ? static_cast<std::size_t>(mb) << 20 : 0;
    e->vmm = vmm_upstream::create(e->link, *e->fences, opt.vmm, page);
  }
  if (e->vmm == nullptr) e->upstream = new device_upstream(e->link);
  pool_options o = device_pool_options(real, device);
  // Never for pinned host pools. Where the arena is unusable (no VMM, a page size the
  // granularity does not divide) arena_page() is 0 and the pool ignores the flag.
  o.arena = opt.arena && e->vmm != nullptr;
  o.stitch = o.arena && opt.stitch; // the upstream stitches arena pages only
  o.stitch_keep_ranges = static_cast<std::size_t>(opt.stitch_keep);
  o.stitch_time_share = static_cast<double>(opt.stitch_time_pct) / 100.0;
  if (opt.arena && opt.verbose != 0 && (e->vmm == nullptr || e->vmm->arena_page() == 0)) {
    std::fprintf(stderr, "gmem: device %d: no virtual memory management; GMEM_ARENA ignored\n",
                 device);
  }
  upstream& up = e->vmm != nullptr ? static_cast<upstream&>(*e->vmm) : *e->upstream;
  e->device_pool = new pool(up, *e->fences, o, e->observer);
  if (e->vmm != nullptr) e->vmm->attach(e->device_pool);
  e->observer->attach(e->device_pool);
  entries_[n] = e;
  count_.store(n + 1, std::memory_order_release);
  return e;
}

pool* context_pools::host_pool(context_entry& entry, unsigned flags) {
  std::size_t n = entry.host_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    if (entry.host[i].flags == flags) return entry.host[i].host_pool;
  }
  std::lock_guard lock(mu_);
  n = entry.host_count.load(std::memory_order_relaxed);
  for (std::size_t i = 0; i < n; ++i) {
    if (entry.host[i].flags == flags) return entry.host[i].host_pool;
  }
  if (n == context_entry::k_max_host_pools || entry.dropped()) return nullptr;
  host_pool_slot& slot = entry.host[n];
  slot.flags = flags;
  slot.upstream = new host_upstream(entry.link, flags);
  pool_options o; // no limit and no warm-up for pinned host memory
  o.reuse_safety = shim_options().reuse_safety;
  o.barriers = false; // never: the CPU reads and writes pinned memory without any stream
  auto* observer = new trace_observer(-1);
  slot.host_pool = new pool(*slot.upstream, *entry.fences, o, observer);
  observer->attach(slot.host_pool);
  entry.host_count.store(n + 1, std::memory_order_release);
  return slot.host_pool;
}

context_entry* context_pools::device_owner(std::uintptr_t address, context_entry* hint) const {
  if (hint != nullptr && !hint->dropped() && hint->device_pool->owns(address)) return hint;
  const std::size_t n = count_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    context_entry* e = entries_[i];
    if (e != hint && !e->dropped() && e->device_pool->owns(address)) return e;
  }
  return nullptr;
}

pool* context_pools::host_owner(std::uintptr_t address, int* device) const {
  const std::size_t n = count_.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < n; ++i) {
    context_entry* e = entries_[i];
    if (e->dropped()) continue;
    const std::size_t h = e->host_count.load(std::memory_order_acquire);
    for (std::size_t j = 0; j < h; ++j) {
      if (e->host[j].host_pool->owns(address)) {
        if (device != nullptr) *device = e->device();
        return e->host[j].host_pool;
      }
    }
  }
  return nullptr;
}

void context_pools::drop(CUcontext ctx) {
  bool dropped = false;
  {
    std::lock_guard lock(mu_);
    if (context_entry* e = find(ctx)) {
      retire_entry(*e, "destroyed");
      abandon_entry(*e);
      g_generation.fetch_add(1, std::memory_order_acq_rel);
      dropped = true;
    }
  }
  if (dropped) record_retirement();
}

void context_pools::drop_primary(const real_driver&, int device) {
  bool dropped = false;
  {
    std::lock_guard lock(mu_);
    const std::size_t n = count_.load(std::memory_order_relaxed);
    for (std::size_t i = 0; i < n; ++i) {
      context_entry* e = entries_[i];
      if (!e->dropped() && e->primary && e->device() == device) {
        retire_entry(*e, "reset");
        abandon_entry(*e);
        g_generation.fetch_add(1, std::memory_order_acq_rel);
        dropped = true;
      }
    }
  }
  if (dropped) record_retirement();
}

std::size_t context_pools::fill_stats(trace::device_stats* out, std::size_t max) const {
  std::size_t filled = 0;
  for_each_entry([&](const context_entry& e) { add_figures(e, out, max, &filled); });
  return filled;
}

} // namespace gmem::shim
