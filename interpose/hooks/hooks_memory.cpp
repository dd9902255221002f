// Pooled allocation hooks: cuMemAlloc_v2 / cuMemFree_v2, cuMemAllocAsync / cuMemFreeAsync
// (and _ptsz), pinned host memory. Each hook is policy: guard, call the pool, translate.
// Requests the driver would reject (null output, 0 bytes) and everything while the shim is
// inactive go to the driver, so the program sees the driver's own answer.
#include "interpose/capture_tracker.h"
#include "interpose/hooks/hook_support.h"
#include "interpose/strict_mode.h"

namespace gmem::shim {
namespace {

using trace::alloc_kind;

// Serves a device allocation from the current context's pool. `fallback` is the driver call
// to make when there is no pool for the calling thread (no current context, too many).
// The pools of the calling thread's context or, for a stream-ordered call made with none
// current (the CUDA runtime's cudaMallocAsync does that), of the stream's context.
context_entry* pools_for(const real_driver& real, const CUstream* on_stream) {
  if (context_entry* e = pools().current(real)) return e;
  CUcontext ctx = nullptr;
  if (on_stream == nullptr || real.cuStreamGetCtx == nullptr ||
      real.cuStreamGetCtx(*on_stream, &ctx) != CUDA_SUCCESS || ctx == nullptr) {
    return nullptr;
  }
  if (context_entry* e = pools().find(ctx)) return e;
  if (real.cuCtxPushCurrent_v2(ctx) != CUDA_SUCCESS) return nullptr; // creates the pools
  context_entry* e = pools().current(real);
  CUcontext popped = nullptr;
  (void)real.cuCtxPopCurrent_v2(&popped);
  return e;
}

template <typename Fallback>
CUresult pool_alloc(CUdeviceptr* out, std::size_t bytes, stream_handle s, std::uintptr_t stream,
                    alloc_kind kind, Fallback&& fallback, const CUstream* on_stream = nullptr) {
  const bool record = !trace::recording_off();
  const std::uint32_t stack = record ? trace::capture_stack() : 0; // before any lock
  const real_driver* real = driver();
  context_entry* e = real != nullptr ? pools_for(*real, on_stream) : nullptr;
  if (GMEM_UNLIKELY(e == nullptr)) {
    return traced_passthrough(alloc_kind::passthrough, bytes, stream, out, fallback);
  }
  alloc_result r;
  {
    hook_scope scope;
    r = e->device_pool->allocate(bytes, s);
  }
  if (GMEM_UNLIKELY(r.status != pool_status::ok)) return to_cuda(r.status);
  *out = r.address;
  if (record) trace::alloc(r.address, bytes, r.size, e->device(), stream, kind, stack);
  return CUDA_SUCCESS;
}

// Returns a device block to the pool that owns it; addresses no pool owns go to `fallback`
// (the driver), so their errors keep the driver's codes. The free is traced before the pool
// sees it (the block may be reused at once); to keep the common case at one pool call, it is
// traced against the current context's pool even when that pool turns out not to own it.
template <typename Fallback>
CUresult pool_free(CUdeviceptr p, stream_handle s, std::uintptr_t stream, alloc_kind kind,
                   Fallback&& fallback) {
  context_entry* e = pools().last_used(); // usually the owner; no driver call needed
  if (GMEM_LIKELY(e != nullptr)) {
    if (!trace::recording_off()) trace::free(p, e->device(), stream, kind);
    hook_scope scope;
    const pool_status st = e->device_pool->deallocate(p, s);
    if (GMEM_LIKELY(st != pool_status::not_owned)) return to_cuda(st);
  }
  context_entry* other = pools().device_owner(p, nullptr);
  if (other == nullptr || other == e) {
    if (e == nullptr) trace::free(p, current_device(), stream, alloc_kind::passthrough);
    return fallback();
  }
  if (e == nullptr) trace::free(p, other->device(), stream, kind);
  hook_scope scope;
  const pool_status st = other->device_pool->deallocate(p, s);
  return st == pool_status::not_owned ? fallback() : to_cuda(st);
}

// After exit() started the pools stand still, but their blocks still look like allocations to
// the program: a late free of one must not reach the driver (it would see an address inside a
// segment and fail). The segment itself is left to the driver's teardown.
bool late_pooled_free(std::uintptr_t p, bool host) {
  if (!exiting() || forked_child() || p == 0) return false;
  return host ? pools().host_owner(p, nullptr) != nullptr
              : pools().device_owner(p, nullptr) != nullptr;
}

// A stream that is capturing a graph: allocations and frees on it belong to the graph.
bool capturing(CUstream s, bool per_thread) {
  return GMEM_UNLIKELY(!captures().none()) && stream_capturing(*driver(), s, per_thread);
}

CUresult alloc_async(CUdeviceptr* out, std::size_t bytes, CUstream s, bool per_thread) {
  auto real_alloc = [&] {
    return per_thread ? GMEM_REAL(cuMemAllocAsync_ptsz, out, bytes, s)
                      : GMEM_REAL(cuMemAllocAsync, out, bytes, s);
  };
  const auto stream = reinterpret_cast<std::uintptr_t>(s);
  if (!shim_active() || out == nullptr || bytes == 0) return real_alloc();
  if (capturing(s, per_thread)) {
    return traced_passthrough(alloc_kind::capture, bytes, stream, out, real_alloc);
  }
  return pool_alloc(out, bytes, pool_stream(s, per_thread), stream, alloc_kind::async, real_alloc,
                    &s);
}

CUresult free_async(CUdeviceptr p, CUstream s, bool per_thread) {
  auto real_free = [&] {
    return per_thread ? GMEM_REAL(cuMemFreeAsync_ptsz, p, s) : GMEM_REAL(cuMemFreeAsync, p, s);
  };
  if (GMEM_UNLIKELY(!shim_active() || p == 0)) {
    return late_pooled_free(p, false) ? CUDA_SUCCESS : real_free();
  }
  // A pooled block freed inside a graph capture cannot be handed back when the graph runs;
  // treating it as a stream-less free keeps it pending until a fence.
  const stream_handle ps = capturing(s, per_thread) ? k_no_stream : pool_stream(s, per_thread);
  return pool_free(p, ps, reinterpret_cast<std::uintptr_t>(s), alloc_kind::async, real_free);
}

CUresult host_alloc(void** out, std::size_t bytes, unsigned flags, bool legacy_entry) {
  auto real_alloc = [&] {
    return legacy_entry ? GMEM_REAL(cuMemAllocHost_v2, out, bytes)
                        : GMEM_REAL(cuMemHostAlloc, out, bytes, flags);
  };
  if (!shim_active() || out == nullptr || bytes == 0 || !shim_options().host) return real_alloc();
  const std::uint32_t stack = trace::capture_stack();
  const real_driver* real = driver();
  context_entry* e = real != nullptr ? pools().current(*real) : nullptr;
  pool* p = e != nullptr ? pools().host_pool(*e, flags) : nullptr;
  if (p == nullptr) return real_alloc();
  alloc_result r;
  {
    hook_scope scope;
    r = p->allocate(bytes, k_no_stream);
  }
  if (r.status != pool_status::ok) return to_cuda(r.status);
  *out = reinterpret_cast<void*>(r.address);
  trace::alloc(r.address, bytes, r.size, -1, 0, alloc_kind::host_pinned, stack);
  if (GMEM_UNLIKELY(strict_mode())) strict_before_alloc(*e); // orders streams like the driver
  return CUDA_SUCCESS;
}

} // namespace
} // namespace gmem::shim

using namespace gmem::shim;
using gmem::k_no_stream;

GMEM_HOOK CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) {
  if (!shim_active() || dptr == nullptr || bytes == 0) return GMEM_REAL(cuMemAlloc_v2, dptr, bytes);
  const CUresult r = pool_alloc(dptr, bytes, k_no_stream, 0, gmem::trace::alloc_kind::device,
                                [&] { return GMEM_REAL(cuMemAlloc_v2, dptr, bytes); });
  if (GMEM_UNLIKELY(strict_mode()) && r == CUDA_SUCCESS) {
    if (context_entry* e = pools().last_used()) strict_before_alloc(*e); // GMEM_STRICT
  }
  return r;
}

GMEM_HOOK CUresult cuMemFree_v2(CUdeviceptr p) {
  if (GMEM_UNLIKELY(!shim_active() || p == 0)) {
    return late_pooled_free(p, false) ? CUDA_SUCCESS : GMEM_REAL(cuMemFree_v2, p);
  }
  const CUresult r = pool_free(p, k_no_stream, 0, gmem::trace::alloc_kind::device,
                               [&] { return GMEM_REAL(cuMemFree_v2, p); });
  if (GMEM_UNLIKELY(strict_mode()) && r == CUDA_SUCCESS) strict_after_device_free(p); // waits
  return r;
}

GMEM_HOOK CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream s) {
  return alloc_async(dptr, bytes, s, false);
}
GMEM_HOOK CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUstream s) {
  return alloc_async(dptr, bytes, s, true);
}
GMEM_HOOK CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  return free_async(p, s, false);
}
GMEM_HOOK CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) {
  return free_async(p, s, true);
}

GMEM_HOOK CUresult cuMemHostAlloc(void** pp, std::size_t bytes, unsigned int flags) {
  return host_alloc(pp, bytes, flags, false);
}
GMEM_HOOK CUresult cuMemAllocHost_v2(void** pp, std::size_t bytes) {
  return host_alloc(pp, bytes, 0, true);
}

GMEM_HOOK CUresult cuMemFreeHost(void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (GMEM_UNLIKELY(!shim_active() || p == nullptr)) {
    return late_pooled_free(address, true) ? CUDA_SUCCESS : GMEM_REAL(cuMemFreeHost, p);
  }
  gmem::pool* owner = pools().host_owner(address, nullptr);
  if (owner == nullptr) return GMEM_REAL(cuMemFreeHost, p);
  gmem::trace::free(address, -1, 0, gmem::trace::alloc_kind::host_pinned);
  CUresult r;
  {
    hook_scope scope;
    r = to_cuda(owner->deallocate(address, k_no_stream));
  }
  if (GMEM_UNLIKELY(strict_mode()) && r == CUDA_SUCCESS) strict_after_host_free(address); // waits
  return r;
}
