// Synchronization the pool learns from (a program's cuCtxSynchronize is a fence for every
// pending block; cuStreamSynchronize makes that stream's frees safe for all streams) and
// context teardown (the driver frees the memory itself: the context's pools are abandoned, and
// the stream registry forgets the context's streams).
#include "interpose/hooks/hook_support.h"
#include "interpose/upstream/stream_registry.h"

namespace gmem::shim {
namespace {

// The context's pools, device first; `host_count` is read once by the caller so that begin
// and end of a fence see the same pools even if another thread adds a host pool meanwhile.
template <typename F> void for_each_pool(context_entry& e, std::size_t host_count, F&& f) {
  f(*e.device_pool);
  for (std::size_t j = 0; j < host_count; ++j)
    f(*e.host[j].host_pool);
}

CUresult stream_synchronize(CUstream s, bool per_thread) {
  auto real_sync = [&] {
    return per_thread ? GMEM_REAL(cuStreamSynchronize_ptsz, s) : GMEM_REAL(cuStreamSynchronize, s);
  };
  const stream_handle ps = pool_stream(s, per_thread);
  if (!shim_active() || ps == k_no_stream) return real_sync();
  context_entry* e = pools().find_current(*driver());
  if (e == nullptr) return real_sync();
  const std::uint64_t ticket = e->device_pool->begin_stream_sync();
  const CUresult r = real_sync();
  if (r == CUDA_SUCCESS) {
    e->device_pool->end_stream_sync(ps, ticket);
    if (e->vmm != nullptr) e->vmm->reap(); // retired segments the GPU is now past
  }
  return r;
}

} // namespace
} // namespace gmem::shim

using namespace gmem::shim;

GMEM_HOOK CUresult cuCtxSynchronize() {
  context_entry* e =
      shim_active() && driver() != nullptr ? pools().find_current(*driver()) : nullptr;
  if (e == nullptr) return GMEM_REAL(cuCtxSynchronize);
  std::uint64_t tickets[1 + context_entry::k_max_host_pools];
  const std::size_t host_count = e->host_count.load(std::memory_order_acquire);
  std::size_t n = 0;
  for_each_pool(*e, host_count, [&](gmem::pool& p) { tickets[n++] = p.begin_external_fence(); });
  const CUresult r = GMEM_REAL(cuCtxSynchronize);
  if (r == CUDA_SUCCESS) {
    n = 0;
    for_each_pool(*e, host_count, [&](gmem::pool& p) { p.end_external_fence(tickets[n++]); });
    if (e->vmm != nullptr) e->vmm->reap();
  }
  return r;
}

GMEM_HOOK CUresult cuStreamSynchronize(CUstream s) {
  return stream_synchronize(s, false);
}
GMEM_HOOK CUresult cuStreamSynchronize_ptsz(CUstream s) {
  return stream_synchronize(s, true);
}

GMEM_HOOK CUresult cuCtxDestroy_v2(CUcontext ctx) {
  if (driver() != nullptr && !forked_child()) {
    pools().drop(ctx);
    streams().drop_context(ctx);
  }
  return GMEM_REAL(cuCtxDestroy_v2, ctx);
}

GMEM_HOOK CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  if (driver() != nullptr && !forked_child()) {
    pools().drop_primary(*driver(), dev);
    streams().drop_primary(dev);
  }
  return GMEM_REAL(cuDevicePrimaryCtxReset_v2, dev);
}

// Only the release that deactivates the primary context frees its memory.
GMEM_HOOK CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  const CUresult r = GMEM_REAL(cuDevicePrimaryCtxRelease_v2, dev);
  const real_driver* real = driver();
  if (r != CUDA_SUCCESS || real == nullptr || forked_child() ||
      real->cuDevicePrimaryCtxGetState == nullptr) {
    return r;
  }
  unsigned flags = 0;
  int active = 1;
  if (real->cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS && active == 0) {
    pools().drop_primary(*real, dev);
    streams().drop_primary(dev);
  }
  return r;
}
