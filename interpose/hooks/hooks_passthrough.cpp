// Allocations the pool does not serve but the profiler records: managed, pitched, explicit
// memory pools, virtual memory mappings, IPC. Frees of these reach the driver through the
// pooled hooks' not-owned path (cuMemFree_v2) or through the hooks below.
#include <atomic>
#include <cstdio>

#include "interpose/hooks/hook_support.h"
#include "interpose/ipc/ipc_sharing.h"

using namespace gmem::shim;
using gmem::trace::alloc_kind;

GMEM_HOOK CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned int flags) {
  return traced_passthrough(alloc_kind::managed, bytes, 0, dptr,
                            [&] { return GMEM_REAL(cuMemAllocManaged, dptr, bytes, flags); });
}

GMEM_HOOK CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width,
                                      std::size_t height, unsigned int element_bytes) {
  const std::uint32_t stack = gmem::trace::capture_stack();
  const CUresult r = GMEM_REAL(cuMemAllocPitch_v2, dptr, pitch, width, height, element_bytes);
  if (r == CUDA_SUCCESS && dptr != nullptr && pitch != nullptr) {
    count_passthrough(alloc_kind::pitched);
    gmem::trace::alloc(*dptr, width * height, *pitch * height, current_device(), 0,
                       alloc_kind::pitched, stack);
  }
  return r;
}

GMEM_HOOK CUresult cuMemAllocFromPoolAsync(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                           CUstream s) {
  return traced_passthrough(
      alloc_kind::mempool, bytes, reinterpret_cast<std::uintptr_t>(s), dptr,
      [&] { return GMEM_REAL(cuMemAllocFromPoolAsync, dptr, bytes, pool, s); });
}
GMEM_HOOK CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes,
                                                CUmemoryPool pool, CUstream s) {
  return traced_passthrough(
      alloc_kind::mempool, bytes, reinterpret_cast<std::uintptr_t>(s), dptr,
      [&] { return GMEM_REAL(cuMemAllocFromPoolAsync_ptsz, dptr, bytes, pool, s); });
}

GMEM_HOOK CUresult cuMemMap(CUdeviceptr ptr, std::size_t size, std::size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags) {
  CUdeviceptr mapped = ptr;
  return traced_passthrough(alloc_kind::vmm, size, 0, &mapped,
                            [&] { return GMEM_REAL(cuMemMap, ptr, size, offset, handle, flags); });
}
GMEM_HOOK CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t size) {
  gmem::trace::free(ptr, current_device(), 0, alloc_kind::vmm);
  return GMEM_REAL(cuMemUnmap, ptr, size);
}

GMEM_HOOK CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* dptr, CUipcMemHandle handle,
                                         unsigned int flags) {
  return ipc_open(dptr, handle, flags);
}
GMEM_HOOK CUresult cuIpcCloseMemHandle(CUdeviceptr ptr) {
  return ipc_close(ptr);
}
// Pooled blocks: interpose/ipc/ipc_sharing.h.
GMEM_HOOK CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr p) {
  return ipc_get_handle(handle, p);
}
