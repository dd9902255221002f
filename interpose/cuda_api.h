// The driver API as the shim sees it: cuda.h's types, the exact exported names (cuda.h maps
// the names a program writes, "cuMemAlloc", to versioned ones, "cuMemAlloc_v2"; the shim
// always spells the versioned name), and the two lists every other file derives from.
#pragma once

#include <cstddef>

#include <cuda.h>

// cuda.h renames cuGetProcAddress to the 5-argument cuGetProcAddress_v2; the 4-argument
// CUDA 11.3 form is a separate exported function that the shim hooks too.
#undef cuGetProcAddress

// cuda.h renames cuStreamBeginCapture to cuStreamBeginCapture_v2; the plain name is the CUDA
// 10.0 form without a mode argument, still exported, which the CUDA runtime asks
// cuGetProcAddress for (version 10000). The shim hooks it too, so captures stay tracked.
#undef cuStreamBeginCapture

// Forms cuda.h declares only when compiled for the per-thread default stream, and the old
// 4-argument cuGetProcAddress and cuStreamBeginCapture.
extern "C" {
CUresult cuStreamBeginCapture(CUstream stream);
CUresult cuStreamBeginCapture_ptsz(CUstream stream);
CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUstream stream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUmemoryPool pool,
                                      CUstream stream);
CUresult cuStreamSynchronize_ptsz(CUstream stream);
CUresult cuStreamIsCapturing_ptsz(CUstream stream, CUstreamCaptureStatus* status);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream stream, CUstreamCaptureMode mode);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream stream, CUgraph graph,
                                          const CUgraphNode* dependencies,
                                          const CUgraphEdgeData* dependency_data, std::size_t count,
                                          CUstreamCaptureMode mode);
CUresult cuStreamEndCapture_ptsz(CUstream stream, CUgraph* graph);
}

// Every function the shim exports and substitutes, as
//   X(exported name, name cuGetProcAddress is asked for, first CUDA version with this ABI,
//     stream flavour: any | legacy | per_thread)
// A row's real function is the driver's export of the same name. The substitution table
// (real_driver.h) maps to the shim's function the export's address and what the driver's
// cuGetProcAddress returns for (name, first version, flavour): both are certainly this ABI.
// A version too low here would map an older ABI onto the hook, so when unsure, go higher.
#define GMEM_HOOKS(X)                                                                              \
  X(cuGetProcAddress_v2, "cuGetProcAddress", 12000, any)                                           \
  X(cuGetProcAddress, "cuGetProcAddress", 11030, any)                                              \
  X(cuMemAlloc_v2, "cuMemAlloc", 3020, any)                                                        \
  X(cuMemFree_v2, "cuMemFree", 3020, any)                                                          \
  X(cuMemAllocAsync, "cuMemAllocAsync", 11020, legacy)                                             \
  X(cuMemAllocAsync_ptsz, "cuMemAllocAsync", 11020, per_thread)                                    \
  X(cuMemFreeAsync, "cuMemFreeAsync", 11020, legacy)                                               \
  X(cuMemFreeAsync_ptsz, "cuMemFreeAsync", 11020, per_thread)                                      \
  X(cuMemHostAlloc, "cuMemHostAlloc", 2020, any)                                                   \
  X(cuMemAllocHost_v2, "cuMemAllocHost", 3020, any)                                                \
  X(cuMemFreeHost, "cuMemFreeHost", 2000, any)                                                     \
  X(cuMemGetInfo_v2, "cuMemGetInfo", 3020, any)                                                    \
  X(cuMemGetAddressRange_v2, "cuMemGetAddressRange", 3020, any)                                    \
  X(cuPointerGetAttribute, "cuPointerGetAttribute", 4000, any)                                     \
  X(cuPointerGetAttributes, "cuPointerGetAttributes", 7000, any)                                   \
  X(cuCtxSynchronize, "cuCtxSynchronize", 2000, any)                                               \
  X(cuStreamSynchronize, "cuStreamSynchronize", 2000, legacy)                                      \
  X(cuStreamSynchronize_ptsz, "cuStreamSynchronize", 7000, per_thread)                             \
  X(cuStreamDestroy_v2, "cuStreamDestroy", 4000, any)                                              \
  X(cuStreamCreate, "cuStreamCreate", 2000, any)                                                   \
  X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", 5050, any)                           \
  X(cuStreamBeginCapture_v2, "cuStreamBeginCapture", 10010, legacy)                                \
  X(cuStreamBeginCapture_v2_ptsz, "cuStreamBeginCapture", 10010, per_thread)                       \
  X(cuStreamBeginCapture, "cuStreamBeginCapture", 10000, legacy)                                   \
  X(cuStreamBeginCapture_ptsz, "cuStreamBeginCapture", 10000, per_thread)                          \
  X(cuStreamBeginCaptureToGraph, "cuStreamBeginCaptureToGraph", 12030, legacy)                     \
  X(cuStreamBeginCaptureToGraph_ptsz, "cuStreamBeginCaptureToGraph", 12030, per_thread)            \
  X(cuStreamEndCapture, "cuStreamEndCapture", 10000, legacy)                                       \
  X(cuStreamEndCapture_ptsz, "cuStreamEndCapture", 10000, per_thread)                              \
  X(cuCtxDestroy_v2, "cuCtxDestroy", 4000, any)                                                    \
  X(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease", 11000, any)                         \
  X(cuDevicePrimaryCtxReset_v2, "cuDevicePrimaryCtxReset", 11000, any)                             \
  X(cuMemAllocManaged, "cuMemAllocManaged", 6000, any)                                             \
  X(cuMemAllocPitch_v2, "cuMemAllocPitch", 3020, any)                                              \
  X(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", 11020, legacy)                             \
  X(cuMemAllocFromPoolAsync_ptsz, "cuMemAllocFromPoolAsync", 11020, per_thread)                    \
  X(cuMemMap, "cuMemMap", 10020, any)                                                              \
  X(cuMemUnmap, "cuMemUnmap", 10020, any)                                                          \
  X(cuIpcOpenMemHandle_v2, "cuIpcOpenMemHandle", 12000, any)                                       \
  X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", 4010, any)                                         \
  X(cuIpcGetMemHandle, "cuIpcGetMemHandle", 4010, any)                                             \
  X(cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess", 4000, any)                                     \
  X(cuGraphAddMemAllocNode, "cuGraphAddMemAllocNode", 11040, any)                                  \
  X(cuGraphAddMemFreeNode, "cuGraphAddMemFreeNode", 11040, any)                                    \
  X(cuGraphAddNode_v2, "cuGraphAddNode", 12030, any)

// Driver functions the shim calls but does not hook: X(exported name).
#define GMEM_REAL_ONLY(X)                                                                          \
  X(cuCtxGetCurrent)                                                                               \
  X(cuCtxPushCurrent_v2)                                                                           \
  X(cuCtxPopCurrent_v2)                                                                            \
  X(cuCtxGetDevice)                                                                                \
  X(cuDeviceTotalMem_v2)                                                                           \
  X(cuDevicePrimaryCtxGetState)                                                                    \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuEventCreate)                                                                                 \
  X(cuEventDestroy_v2)                                                                             \
  X(cuEventRecord)                                                                                 \
  X(cuEventQuery)                                                                                  \
  X(cuStreamWaitEvent)                                                                             \
  X(cuStreamQuery)                                                                                 \
  X(cuEventSynchronize)                                                                            \
  X(cuStreamIsCapturing)                                                                           \
  X(cuStreamIsCapturing_ptsz)                                                                      \
  X(cuMemCreate)                                                                                   \
  X(cuMemRelease)                                                                                  \
  X(cuMemAddressReserve)                                                                           \
  X(cuMemAddressFree)                                                                              \
  X(cuMemSetAccess)                                                                                \
  X(cuMemGetAllocationGranularity)                                                                 \
  X(cuMemExportToShareableHandle)                                                                  \
  X(cuMemImportFromShareableHandle)                                                                \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuStreamGetCtx)
