// cuGetProcAddress of the fake driver, both forms. Like the real one it maps a base name
// ("cuMemAlloc") and a CUDA version to the variant that version expects, and the per-thread
// flag to the _ptsz variant, so the shim's substitution by address is tested against a driver
// that hands out several functions for one name.
#include <cstring>

#include "tests/fake_cuda/fake_state.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))
#define FAKE_FN(f) reinterpret_cast<void*>(&f)

#undef cuGetProcAddress
#undef cuMemAlloc
#undef cuStreamBeginCapture
extern "C" {
CUresult cuStreamBeginCapture(CUstream); // CUDA 10.0 ABI
CUresult cuGetProcAddress(const char*, void**, int, cuuint64_t);
CUresult cuMemAlloc(unsigned int*, unsigned int);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr*, std::size_t, CUstream);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr, CUstream);
CUresult cuStreamSynchronize_ptsz(CUstream);
CUresult cuStreamIsCapturing_ptsz(CUstream, CUstreamCaptureStatus*);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream, CUstreamCaptureMode);
CUresult cuStreamBeginCapture_ptsz(CUstream);
CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream, CUgraph, const CUgraphNode*,
                                          const CUgraphEdgeData*, std::size_t, CUstreamCaptureMode);
CUresult cuStreamEndCapture_ptsz(CUstream, CUgraph*);
CUresult cuEventRecord_ptsz(CUevent, CUstream);
CUresult cuStreamWaitEvent_ptsz(CUstream, CUevent, unsigned int);
CUresult cuLaunchHostFunc_ptsz(CUstream, CUhostFn, void*);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr, unsigned char, std::size_t, CUstream);
CUresult cuCtxCreate_v2(CUcontext*, unsigned int, CUdevice);
CUresult fakeLaunchKernel(CUstream, unsigned, CUdeviceptr, unsigned char, std::size_t);
}

namespace {

struct proc_row {
  const char* name;
  int min_version; // the first CUDA version that gets this variant
  void* legacy;
  void* per_thread; // nullptr = same as legacy
};

// Rows of one name are ordered by descending min_version.
const proc_row k_procs[] = {
    {"cuGetProcAddress", 12000, FAKE_FN(cuGetProcAddress_v2), nullptr},
    {"cuGetProcAddress", 11030, FAKE_FN(cuGetProcAddress), nullptr},
    {"cuInit", 2000, FAKE_FN(cuInit), nullptr},
    {"cuDriverGetVersion", 2020, FAKE_FN(cuDriverGetVersion), nullptr},
    {"cuDeviceGet", 2000, FAKE_FN(cuDeviceGet), nullptr},
    {"cuDeviceGetCount", 2000, FAKE_FN(cuDeviceGetCount), nullptr},
    {"cuDeviceTotalMem", 3020, FAKE_FN(cuDeviceTotalMem_v2), nullptr},
    {"cuDevicePrimaryCtxRetain", 7000, FAKE_FN(cuDevicePrimaryCtxRetain), nullptr},
    {"cuDevicePrimaryCtxRelease", 11000, FAKE_FN(cuDevicePrimaryCtxRelease_v2), nullptr},
    {"cuDevicePrimaryCtxReset", 11000, FAKE_FN(cuDevicePrimaryCtxReset_v2), nullptr},
    {"cuDevicePrimaryCtxGetState", 7000, FAKE_FN(cuDevicePrimaryCtxGetState), nullptr},
    {"cuCtxCreate", 12050, FAKE_FN(cuCtxCreate_v4), nullptr},
    {"cuCtxCreate", 3020, FAKE_FN(cuCtxCreate_v2), nullptr},
    {"cuCtxDestroy", 4000, FAKE_FN(cuCtxDestroy_v2), nullptr},
    {"cuCtxGetCurrent", 4000, FAKE_FN(cuCtxGetCurrent), nullptr},
    {"cuCtxSetCurrent", 4000, FAKE_FN(cuCtxSetCurrent), nullptr},
    {"cuCtxPushCurrent", 4000, FAKE_FN(cuCtxPushCurrent_v2), nullptr},
    {"cuCtxPopCurrent", 4000, FAKE_FN(cuCtxPopCurrent_v2), nullptr},
    {"cuCtxGetDevice", 2000, FAKE_FN(cuCtxGetDevice), nullptr},
    {"cuCtxSynchronize", 2000, FAKE_FN(cuCtxSynchronize), nullptr},
    {"cuCtxRecordEvent", 12050, FAKE_FN(cuCtxRecordEvent), nullptr},
    {"cuCtxWaitEvent", 12050, FAKE_FN(cuCtxWaitEvent), nullptr},
    {"cuMemAlloc", 3020, FAKE_FN(cuMemAlloc_v2), nullptr},
    {"cuMemAlloc", 2000, FAKE_FN(cuMemAlloc), nullptr},
    {"cuMemFree", 3020, FAKE_FN(cuMemFree_v2), nullptr},
    {"cuMemAllocAsync", 11020, FAKE_FN(cuMemAllocAsync), FAKE_FN(cuMemAllocAsync_ptsz)},
    {"cuMemFreeAsync", 11020, FAKE_FN(cuMemFreeAsync), FAKE_FN(cuMemFreeAsync_ptsz)},
    {"cuMemAllocManaged", 6000, FAKE_FN(cuMemAllocManaged), nullptr},
    {"cuMemAllocPitch", 3020, FAKE_FN(cuMemAllocPitch_v2), nullptr},
    {"cuMemHostAlloc", 2020, FAKE_FN(cuMemHostAlloc), nullptr},
    {"cuMemAllocHost", 3020, FAKE_FN(cuMemAllocHost_v2), nullptr},
    {"cuMemFreeHost", 2000, FAKE_FN(cuMemFreeHost), nullptr},
    {"cuMemGetInfo", 3020, FAKE_FN(cuMemGetInfo_v2), nullptr},
    {"cuMemGetAddressRange", 3020, FAKE_FN(cuMemGetAddressRange_v2), nullptr},
    {"cuPointerGetAttribute", 4000, FAKE_FN(cuPointerGetAttribute), nullptr},
    {"cuPointerGetAttributes", 7000, FAKE_FN(cuPointerGetAttributes), nullptr},
    {"cuStreamCreate", 2000, FAKE_FN(cuStreamCreate), nullptr},
    {"cuStreamCreateWithPriority", 5050, FAKE_FN(cuStreamCreateWithPriority), nullptr},
    {"cuStreamQuery", 2000, FAKE_FN(cuStreamQuery), nullptr},
    {"cuStreamGetCtx", 9020, FAKE_FN(cuStreamGetCtx), nullptr},
    {"cuStreamDestroy", 4000, FAKE_FN(cuStreamDestroy_v2), nullptr},
    {"cuStreamSynchronize", 2000, FAKE_FN(cuStreamSynchronize), FAKE_FN(cuStreamSynchronize_ptsz)},
    {"cuStreamIsCapturing", 10000, FAKE_FN(cuStreamIsCapturing), FAKE_FN(cuStreamIsCapturing_ptsz)},
    {"cuStreamBeginCapture", 10010, FAKE_FN(cuStreamBeginCapture_v2),
     FAKE_FN(cuStreamBeginCapture_v2_ptsz)},
    {"cuStreamBeginCapture", 10000, FAKE_FN(cuStreamBeginCapture),
     FAKE_FN(cuStreamBeginCapture_ptsz)},
    {"cuStreamBeginCaptureToGraph", 12030, FAKE_FN(cuStreamBeginCaptureToGraph),
     FAKE_FN(cuStreamBeginCaptureToGraph_ptsz)},
    {"cuStreamEndCapture", 10000, FAKE_FN(cuStreamEndCapture), FAKE_FN(cuStreamEndCapture_ptsz)},
    {"cuEventCreate", 2000, FAKE_FN(cuEventCreate), nullptr},
    {"cuEventDestroy", 4000, FAKE_FN(cuEventDestroy_v2), nullptr},
    {"cuEventRecord", 2000, FAKE_FN(cuEventRecord), FAKE_FN(cuEventRecord_ptsz)},
    {"cuEventQuery", 2000, FAKE_FN(cuEventQuery), nullptr},
    {"cuEventSynchronize", 2000, FAKE_FN(cuEventSynchronize), nullptr},
    {"cuStreamWaitEvent", 3020, FAKE_FN(cuStreamWaitEvent), FAKE_FN(cuStreamWaitEvent_ptsz)},
    {"cuLaunchHostFunc", 10000, FAKE_FN(cuLaunchHostFunc), FAKE_FN(cuLaunchHostFunc_ptsz)},
    {"cuMemsetD8Async", 3020, FAKE_FN(cuMemsetD8Async), FAKE_FN(cuMemsetD8Async_ptsz)},
    {"cuMemsetD8", 3020, FAKE_FN(cuMemsetD8_v2), nullptr},
    {"cuMemcpyHtoD", 3020, FAKE_FN(cuMemcpyHtoD_v2), nullptr},
    {"cuMemcpyDtoH", 3020, FAKE_FN(cuMemcpyDtoH_v2), nullptr},
    {"cuIpcGetMemHandle", 4010, FAKE_FN(cuIpcGetMemHandle), nullptr},
    {"cuIpcOpenMemHandle", 11000, FAKE_FN(cuIpcOpenMemHandle_v2), nullptr},
    {"cuIpcCloseMemHandle", 4010, FAKE_FN(cuIpcCloseMemHandle), nullptr},
    {"cuGraphCreate", 10000, FAKE_FN(cuGraphCreate), nullptr},
    {"cuGraphDestroy", 10000, FAKE_FN(cuGraphDestroy), nullptr},
    {"cuGraphAddMemAllocNode", 11040, FAKE_FN(cuGraphAddMemAllocNode), nullptr},
    {"cuGraphAddMemFreeNode", 11040, FAKE_FN(cuGraphAddMemFreeNode), nullptr},
    {"cuGraphAddNode", 12030, FAKE_FN(cuGraphAddNode_v2), nullptr},
    {"cuGetErrorName", 6000, FAKE_FN(cuGetErrorName), nullptr},
    {"cuGetErrorString", 6000, FAKE_FN(cuGetErrorString), nullptr},
};

CUresult lookup(const char* symbol, void** pfn, int version, cuuint64_t flags,
                CUdriverProcAddressQueryResult* status) {
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  bool known = false;
  for (const proc_row& row : k_procs) {
    if (std::strcmp(row.name, symbol) != 0) continue;
    if (row.min_version > fake::get().driver_version) continue; // newer than this "driver"
    known = true;
    if (version < row.min_version) continue;
    const bool per_thread = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
    *pfn = per_thread && row.per_thread != nullptr ? row.per_thread : row.legacy;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (status != nullptr) {
    *status =
        known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  }
  return CUDA_ERROR_NOT_FOUND;
}

} // namespace

FAKE_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                      CUdriverProcAddressQueryResult* status) {
  return lookup(symbol, pfn, version, flags, status);
}
FAKE_API CUresult cuGetProcAddress(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return lookup(symbol, pfn, version, flags, nullptr);
}

FAKE_API CUresult cuGetErrorName(CUresult error, const char** out) {
  switch (error) {
  case CUDA_SUCCESS:
    *out = "CUDA_SUCCESS";
    return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_VALUE:
    *out = "CUDA_ERROR_INVALID_VALUE";
    return CUDA_SUCCESS;
  case CUDA_ERROR_OUT_OF_MEMORY:
    *out = "CUDA_ERROR_OUT_OF_MEMORY";
    return CUDA_SUCCESS;
  case CUDA_ERROR_NOT_INITIALIZED:
    *out = "CUDA_ERROR_NOT_INITIALIZED";
    return CUDA_SUCCESS;
  case CUDA_ERROR_INVALID_CONTEXT:
    *out = "CUDA_ERROR_INVALID_CONTEXT";
    return CUDA_SUCCESS;
  case CUDA_ERROR_NOT_FOUND:
    *out = "CUDA_ERROR_NOT_FOUND";
    return CUDA_SUCCESS;
  default:
    *out = "CUDA_ERROR_(fake: other)";
    return CUDA_SUCCESS;
  }
}
FAKE_API CUresult cuGetErrorString(CUresult error, const char** out) {
  return cuGetErrorName(error, out);
}
