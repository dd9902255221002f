#include "client/driver.h"

#include <cuda.h>
#include <dlfcn.h>

namespace gmem::client {

// Entry points resolved once with dlsym. Optional ones (the primary-context calls) may be
// missing from a minimal driver; query() then answers only for the current context's device.
struct driver::table {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
  CUresult (*device_total_mem)(std::size_t*, CUdevice) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_get_device)(CUdevice*) = nullptr;
  CUresult (*mem_get_info)(std::size_t*, std::size_t*) = nullptr;
  CUresult (*primary_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*primary_release)(CUdevice) = nullptr;
  CUresult (*ctx_push)(CUcontext) = nullptr;
  CUresult (*ctx_pop)(CUcontext*) = nullptr;
};

namespace {
template <class F> void resolve_fn(void* handle, const char* name, F& out) {
  out = reinterpret_cast<F>(dlsym(handle, name));
}
} // namespace

driver::driver() noexcept {
  handle_ = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* e = dlerror();
    error_ = std::string("libcuda.so.1 could not be loaded (") + (e ? e : "unknown") + ")";
    return;
  }
  static table t; // written once, here, before loaded_ is published by get()'s static init
  resolve_fn(handle_, "cuInit", t.init);
  resolve_fn(handle_, "cuDeviceGetCount", t.device_get_count);
  resolve_fn(handle_, "cuDeviceGet", t.device_get);
  resolve_fn(handle_, "cuDeviceGetName", t.device_get_name);
  resolve_fn(handle_, "cuDeviceTotalMem_v2", t.device_total_mem);
  resolve_fn(handle_, "cuCtxGetCurrent", t.ctx_get_current);
  resolve_fn(handle_, "cuCtxGetDevice", t.ctx_get_device);
  resolve_fn(handle_, "cuMemGetInfo_v2", t.mem_get_info);
  resolve_fn(handle_, "cuDevicePrimaryCtxRetain", t.primary_retain);
  resolve_fn(handle_, "cuDevicePrimaryCtxRelease_v2", t.primary_release);
  resolve_fn(handle_, "cuCtxPushCurrent_v2", t.ctx_push);
  resolve_fn(handle_, "cuCtxPopCurrent_v2", t.ctx_pop);
  fn_ = &t;
  if (!t.init || !t.device_get_count || !t.device_get || !t.mem_get_info) {
    error_ = "libcuda.so.1 lacks cuInit, cuDeviceGetCount, cuDeviceGet or cuMemGetInfo_v2";
    return;
  }
  const CUresult rc = t.init(0);
  if (rc != CUDA_SUCCESS) {
    error_ = "cuInit(0) failed with CUresult " + std::to_string(static_cast<int>(rc));
    return;
  }
  loaded_ = true;
}

const driver& driver::get() noexcept {
  static const driver d; // thread-safe initialization (C++11 magic statics)
  return d;
}

int driver::device_count() const noexcept {
  int n = 0;
  if (!loaded_ || fn_->device_get_count(&n) != CUDA_SUCCESS) return 0;
  return n;
}

int driver::resolve(int device) const noexcept {
  if (device >= 0 || !loaded_) return device < 0 ? 0 : device;
  CUcontext ctx = nullptr;
  CUdevice d = 0;
  if (fn_->ctx_get_current && fn_->ctx_get_device && fn_->ctx_get_current(&ctx) == CUDA_SUCCESS &&
      ctx != nullptr && fn_->ctx_get_device(&d) == CUDA_SUCCESS)
    return static_cast<int>(d);
  return 0;
}

gmem_status driver::query(int device, device_memory* out) const noexcept {
  if (!loaded_) return GMEM_ERROR_NO_DRIVER;
  if (device < 0 || device >= device_count()) return GMEM_ERROR_INVALID_ARGUMENT;
  CUdevice dev = 0;
  if (fn_->device_get(&dev, device) != CUDA_SUCCESS) return GMEM_ERROR_DRIVER;
  out->device = device;
  char name[256] = {};
  if (fn_->device_get_name && fn_->device_get_name(name, sizeof name - 1, dev) == CUDA_SUCCESS)
    out->name = name;
  std::size_t total = 0, free = 0;
  if (fn_->device_total_mem && fn_->device_total_mem(&total, dev) == CUDA_SUCCESS)
    out->total_bytes = total;

  // The current context answers for its own device only.
  CUcontext ctx = nullptr;
  CUdevice cur = -1;
  if (fn_->ctx_get_current && fn_->ctx_get_current(&ctx) == CUDA_SUCCESS && ctx != nullptr &&
      fn_->ctx_get_device && fn_->ctx_get_device(&cur) == CUDA_SUCCESS && cur == dev) {
    if (fn_->mem_get_info(&free, &total) != CUDA_SUCCESS) return GMEM_ERROR_DRIVER;
  } else {
    if (!fn_->primary_retain || !fn_->primary_release || !fn_->ctx_push || !fn_->ctx_pop)
      return GMEM_ERROR_DRIVER;
    CUcontext primary = nullptr;
    if (fn_->primary_retain(&primary, dev) != CUDA_SUCCESS) return GMEM_ERROR_DRIVER;
    CUresult rc = fn_->ctx_push(primary);
    if (rc == CUDA_SUCCESS) {
      rc = fn_->mem_get_info(&free, &total);
      CUcontext popped = nullptr;
      fn_->ctx_pop(&popped);
    }
    fn_->primary_release(dev);
    if (rc != CUDA_SUCCESS) return GMEM_ERROR_DRIVER;
  }
  out->free_bytes = free;
  if (out->total_bytes == 0) out->total_bytes = total;
  return GMEM_OK;
}

} // namespace gmem::client
