// The driver functions the shim probe uses, fetched by one of the three routes a real program
// takes (docs/design.md, "Interception"):
//   exported  the probe is linked against libcuda.so.1 and calls the symbols (shim_probe_linked)
//   dlsym     dlopen("libcuda.so.1") + dlsym of every versioned name
//   runtime   dlopen, ONE dlsym("cuGetProcAddress_v2"), ask it for "cuGetProcAddress" and fetch
//             everything through that, by base name and version, as the CUDA runtime does
//             (per_thread: with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, the _ptsz forms)
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tests/fake_cuda/fake_cuda.h"

namespace probe {

struct driver_api {
  CUresult (*init)(unsigned);
  CUresult (*primary_retain)(CUcontext*, CUdevice);
  CUresult (*primary_release)(CUdevice);
  CUresult (*primary_reset)(CUdevice);
  CUresult (*ctx_set_current)(CUcontext);
  CUresult (*ctx_create)(CUcontext*, unsigned, CUdevice); // cuCtxCreate_v2
  CUresult (*ctx_destroy)(CUcontext);
  CUresult (*ctx_synchronize)();
  CUresult (*mem_alloc)(CUdeviceptr*, std::size_t);
  CUresult (*mem_free)(CUdeviceptr);
  CUresult (*mem_alloc_async)(CUdeviceptr*, std::size_t, CUstream);
  CUresult (*mem_free_async)(CUdeviceptr, CUstream);
  CUresult (*mem_host_alloc)(void**, std::size_t, unsigned);
  CUresult (*mem_alloc_host)(void**, std::size_t);
  CUresult (*mem_free_host)(void*);
  CUresult (*mem_get_info)(std::size_t*, std::size_t*);
  CUresult (*mem_get_address_range)(CUdeviceptr*, std::size_t*, CUdeviceptr);
  CUresult (*pointer_get_attribute)(void*, CUpointer_attribute, CUdeviceptr);
  CUresult (*pointer_get_attributes)(unsigned, CUpointer_attribute*, void**, CUdeviceptr);
  CUresult (*mem_alloc_managed)(CUdeviceptr*, std::size_t, unsigned);
  CUresult (*stream_create)(CUstream*, unsigned);
  CUresult (*stream_create_with_priority)(CUstream*, unsigned, int);
  CUresult (*stream_begin_capture)(CUstream, CUstreamCaptureMode);
  CUresult (*stream_begin_capture_10000)(CUstream); // the CUDA 10.0 form, still exported
  CUresult (*stream_begin_capture_to_graph)(CUstream, CUgraph, const CUgraphNode*,
                                            const CUgraphEdgeData*, std::size_t,
                                            CUstreamCaptureMode); // CUDA 12.3
  CUresult (*stream_end_capture)(CUstream, CUgraph*);
  CUresult (*stream_synchronize)(CUstream);
  CUresult (*stream_destroy)(CUstream);
  CUresult (*memset_d8_async)(CUdeviceptr, unsigned char, std::size_t, CUstream);
  CUresult (*memset_d8)(CUdeviceptr, unsigned char, std::size_t);
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, std::size_t);
  CUresult (*ipc_get_mem_handle)(CUipcMemHandle*, CUdeviceptr);
  // fake-only
  CUresult (*launch_kernel)(CUstream, unsigned, CUdeviceptr, unsigned char, std::size_t);
  CUresult (*set_capturing)(CUstream, int);
  CUresult (*stream_event_records)(CUstream, std::uint64_t*);
  void (*get_counters)(fake_cuda_counters*);
  // cuGetProcAddress as the runtime route got it (nullptr on other routes)
  CUresult (*get_proc_address)(const char*, void**, int, cuuint64_t,
                               CUdriverProcAddressQueryResult*);
};

// Fills `api` by `route` ("exported", "dlsym", "runtime", "runtime_ptsz"). Returns an error
// message, empty on success.
std::string load(const std::string& route, driver_api& api);

} // namespace probe
