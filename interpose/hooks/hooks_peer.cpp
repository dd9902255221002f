// Peer access to virtual-memory segments. cuCtxEnablePeerAccess makes the peer context's
// cuMemAlloc memory reachable from the current one, but not memory mapped with cuMemMap: that
// needs cuMemSetAccess for the accessing device. So the grant is applied to the peer's pool
// (every segment, present and future), as the program expects of its cudaMalloc memory.
#include "interpose/hooks/hook_support.h"

using namespace gmem::shim;

GMEM_HOOK CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  const CUresult r = GMEM_REAL(cuCtxEnablePeerAccess, peer, flags);
  if (r != CUDA_SUCCESS || !shim_active() || driver() == nullptr) return r;
  const int device = current_device();
  if (device < 0) return r;
  vmm_upstream::note_peer_access(peer, device);
  if (context_entry* e = pools().find(peer); e != nullptr && e->vmm != nullptr)
    e->vmm->grant(device);
  return r;
}
