#include "tests/interpose/probe_driver.h"

#include <dlfcn.h>

#undef cuGetProcAddress
#undef cuMemAlloc
#undef cuStreamBeginCapture
extern "C" {
CUresult cuCtxCreate_v2(CUcontext*, unsigned, CUdevice);
CUresult cuStreamBeginCapture(CUstream);
}

namespace probe {
namespace {

template <typename F> void set(F& f, void* p) {
  f = reinterpret_cast<F>(p);
}

#if GMEM_PROBE_LINKED
void load_exported(driver_api& a) {
  a.init = &cuInit;
  a.primary_retain = &cuDevicePrimaryCtxRetain;
  a.primary_release = &cuDevicePrimaryCtxRelease_v2;
  a.primary_reset = &cuDevicePrimaryCtxReset_v2;
  a.ctx_set_current = &cuCtxSetCurrent;
  a.ctx_create = &cuCtxCreate_v2;
  a.ctx_destroy = &cuCtxDestroy_v2;
  a.ctx_synchronize = &cuCtxSynchronize;
  a.mem_alloc = &cuMemAlloc_v2;
  a.mem_free = &cuMemFree_v2;
  a.mem_alloc_async = &cuMemAllocAsync;
  a.mem_free_async = &cuMemFreeAsync;
  a.mem_host_alloc = &cuMemHostAlloc;
  a.mem_alloc_host = &cuMemAllocHost_v2;
  a.mem_free_host = &cuMemFreeHost;
  a.mem_get_info = &cuMemGetInfo_v2;
  a.mem_get_address_range = &cuMemGetAddressRange_v2;
  a.pointer_get_attribute = &cuPointerGetAttribute;
  a.pointer_get_attributes = &cuPointerGetAttributes;
  a.mem_alloc_managed = &cuMemAllocManaged;
  a.stream_create = &cuStreamCreate;
  a.stream_create_with_priority = &cuStreamCreateWithPriority;
  a.stream_begin_capture = &cuStreamBeginCapture_v2;
  a.stream_begin_capture_10000 = &cuStreamBeginCapture;
  a.stream_begin_capture_to_graph = &cuStreamBeginCaptureToGraph;
  a.stream_end_capture = &cuStreamEndCapture;
  a.stream_synchronize = &cuStreamSynchronize;
  a.stream_destroy = &cuStreamDestroy_v2;
  a.memset_d8_async = &cuMemsetD8Async;
  a.memset_d8 = &cuMemsetD8_v2;
  a.memcpy_dtoh = &cuMemcpyDtoH_v2;
  a.ipc_get_mem_handle = &cuIpcGetMemHandle;
  a.launch_kernel = &fakeLaunchKernel;
  a.set_capturing = &fakeSetCapturing;
  a.get_counters = &fakeGetCounters;
}
#endif

void load_by_dlsym(void* h, driver_api& a) {
  set(a.init, dlsym(h, "cuInit"));
  set(a.primary_retain, dlsym(h, "cuDevicePrimaryCtxRetain"));
  set(a.primary_release, dlsym(h, "cuDevicePrimaryCtxRelease_v2"));
  set(a.primary_reset, dlsym(h, "cuDevicePrimaryCtxReset_v2"));
  set(a.ctx_set_current, dlsym(h, "cuCtxSetCurrent"));
  set(a.ctx_create, dlsym(h, "cuCtxCreate_v2"));
  set(a.ctx_destroy, dlsym(h, "cuCtxDestroy_v2"));
  set(a.ctx_synchronize, dlsym(h, "cuCtxSynchronize"));
  set(a.mem_alloc, dlsym(h, "cuMemAlloc_v2"));
  set(a.mem_free, dlsym(h, "cuMemFree_v2"));
  set(a.mem_alloc_async, dlsym(h, "cuMemAllocAsync"));
  set(a.mem_free_async, dlsym(h, "cuMemFreeAsync"));
  set(a.mem_host_alloc, dlsym(h, "cuMemHostAlloc"));
  set(a.mem_alloc_host, dlsym(h, "cuMemAllocHost_v2"));
  set(a.mem_free_host, dlsym(h, "cuMemFreeHost"));
  set(a.mem_get_info, dlsym(h, "cuMemGetInfo_v2"));
  set(a.mem_get_address_range, dlsym(h, "cuMemGetAddressRange_v2"));
  set(a.pointer_get_attribute, dlsym(h, "cuPointerGetAttribute"));
  set(a.pointer_get_attributes, dlsym(h, "cuPointerGetAttributes"));
  set(a.mem_alloc_managed, dlsym(h, "cuMemAllocManaged"));
  set(a.stream_create, dlsym(h, "cuStreamCreate"));
  set(a.stream_create_with_priority, dlsym(h, "cuStreamCreateWithPriority"));
  set(a.stream_begin_capture, dlsym(h, "cuStreamBeginCapture_v2"));
  set(a.stream_begin_capture_10000, dlsym(h, "cuStreamBeginCapture"));
  set(a.stream_begin_capture_to_graph, dlsym(h, "cuStreamBeginCaptureToGraph"));
  set(a.stream_end_capture, dlsym(h, "cuStreamEndCapture"));
  set(a.stream_synchronize, dlsym(h, "cuStreamSynchronize"));
  set(a.stream_destroy, dlsym(h, "cuStreamDestroy_v2"));
  set(a.memset_d8_async, dlsym(h, "cuMemsetD8Async"));
  set(a.memset_d8, dlsym(h, "cuMemsetD8_v2"));
  set(a.memcpy_dtoh, dlsym(h, "cuMemcpyDtoH_v2"));
  set(a.ipc_get_mem_handle, dlsym(h, "cuIpcGetMemHandle"));
}

std::string load_by_proc_address(void* h, bool per_thread, driver_api& a) {
  using gpa_fn =
      CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  auto first = reinterpret_cast<gpa_fn>(dlsym(h, "cuGetProcAddress_v2"));
  if (first == nullptr) return "dlsym(cuGetProcAddress_v2) failed";
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (first("cuGetProcAddress", &p, 12000, 0, &status) != CUDA_SUCCESS || p == nullptr) {
    return "cuGetProcAddress(\"cuGetProcAddress\") failed";
  }
  auto gpa = reinterpret_cast<gpa_fn>(p);
  a.get_proc_address = gpa;
  const cuuint64_t flags = per_thread ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                      : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  std::string missing;
  auto get = [&](auto& fn, const char* name, int version = CUDA_VERSION) {
    void* q = nullptr;
    CUdriverProcAddressQueryResult st{};
    if (gpa(name, &q, version, flags, &st) != CUDA_SUCCESS) missing += std::string(" ") + name;
    set(fn, q);
  };
  get(a.init, "cuInit");
  get(a.primary_retain, "cuDevicePrimaryCtxRetain");
  get(a.primary_release, "cuDevicePrimaryCtxRelease");
  get(a.primary_reset, "cuDevicePrimaryCtxReset");
  get(a.ctx_set_current, "cuCtxSetCurrent");
  get(a.ctx_destroy, "cuCtxDestroy");
  get(a.ctx_synchronize, "cuCtxSynchronize");
  get(a.mem_alloc, "cuMemAlloc");
  get(a.mem_free, "cuMemFree");
  get(a.mem_alloc_async, "cuMemAllocAsync");
  get(a.mem_free_async, "cuMemFreeAsync");
  get(a.mem_host_alloc, "cuMemHostAlloc");
  get(a.mem_alloc_host, "cuMemAllocHost");
  get(a.mem_free_host, "cuMemFreeHost");
  get(a.mem_get_info, "cuMemGetInfo");
  get(a.mem_get_address_range, "cuMemGetAddressRange");
  get(a.pointer_get_attribute, "cuPointerGetAttribute");
  get(a.pointer_get_attributes, "cuPointerGetAttributes");
  get(a.mem_alloc_managed, "cuMemAllocManaged");
  get(a.stream_create, "cuStreamCreate");
  get(a.stream_create_with_priority, "cuStreamCreateWithPriority");
  get(a.stream_begin_capture, "cuStreamBeginCapture");
  // The CUDA 13 runtime asks for the CUDA 10.0 form too.
  get(a.stream_begin_capture_10000, "cuStreamBeginCapture", 10000);
  get(a.stream_begin_capture_to_graph, "cuStreamBeginCaptureToGraph");
  get(a.stream_end_capture, "cuStreamEndCapture");
  get(a.stream_synchronize, "cuStreamSynchronize");
  get(a.stream_destroy, "cuStreamDestroy");
  get(a.memset_d8_async, "cuMemsetD8Async");
  get(a.memset_d8, "cuMemsetD8");
  get(a.memcpy_dtoh, "cuMemcpyDtoH");
  get(a.ipc_get_mem_handle, "cuIpcGetMemHandle");
  set(a.ctx_create, dlsym(h, "cuCtxCreate_v2"));
  return missing.empty() ? std::string() : "cuGetProcAddress found no" + missing;
}

} // namespace

std::string load(const std::string& route, driver_api& api) {
  api = {};
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return std::string("dlopen(libcuda.so.1): ") + dlerror();
  std::string error;
  if (route == "exported") {
#if GMEM_PROBE_LINKED
    load_exported(api);
#else
    return "route 'exported' needs shim_probe_linked";
#endif
  } else if (route == "dlsym") {
    load_by_dlsym(h, api);
  } else if (route == "runtime" || route == "runtime_ptsz") {
    error = load_by_proc_address(h, route == "runtime_ptsz", api);
  } else {
    return "unknown route '" + route + "'";
  }
  set(api.launch_kernel, dlsym(h, "fakeLaunchKernel"));
  set(api.set_capturing, dlsym(h, "fakeSetCapturing"));
  set(api.stream_event_records, dlsym(h, "fakeStreamEventRecords"));
  set(api.get_counters, dlsym(h, "fakeGetCounters"));
  return error;
}

} // namespace probe
