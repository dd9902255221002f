// The CUDA driver for the examples, opened at run time with dlopen("libcuda.so.1"): the same
// binary runs on a GPU and on the simulated device (tests/fake_cuda, host memory behind the
// driver API), and under gmem's shim its allocations go through gmem's pool (the shim hands
// out its own functions for dlsym lookups of the driver).
//
// Computation needs a backend: with a real driver the examples load a PTX kernel
// (cuModuleLoadData); the simulated device has no modules, so they compute on the host and
// move data with cuMemcpy. has_modules() tells which.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>

namespace examples {

struct cuda_driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
  CUresult (*primary_retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*ctx_synchronize)() = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, std::size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*memcpy_htod)(CUdeviceptr, const void*, std::size_t) = nullptr;
  CUresult (*memcpy_dtoh)(void*, CUdeviceptr, std::size_t) = nullptr;
  CUresult (*memset_d8)(CUdeviceptr, unsigned char, std::size_t) = nullptr;
  // Optional: absent on the simulated device.
  CUresult (*module_load_data)(CUmodule*, const void*) = nullptr;
  CUresult (*module_get_function)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                            unsigned, CUstream, void**, void**) = nullptr;
  char device_name[256] = {};

  bool has_modules() const { return module_load_data && module_get_function && launch_kernel; }

  // Opens the driver and makes device 0's primary context current; exits with a message
  // naming what failed otherwise.
  static cuda_driver open() {
    cuda_driver d;
    void* h = dlopen("libcuda.so.1", RTLD_NOW);
    if (h == nullptr) fail("libcuda.so.1 could not be loaded", dlerror());
    load(h, "cuInit", d.init);
    load(h, "cuDeviceGet", d.device_get);
    load(h, "cuDeviceGetName", d.device_get_name);
    load(h, "cuDevicePrimaryCtxRetain", d.primary_retain);
    load(h, "cuCtxSetCurrent", d.ctx_set_current);
    load(h, "cuCtxSynchronize", d.ctx_synchronize);
    load(h, "cuMemAlloc_v2", d.mem_alloc);
    load(h, "cuMemFree_v2", d.mem_free);
    load(h, "cuMemcpyHtoD_v2", d.memcpy_htod);
    load(h, "cuMemcpyDtoH_v2", d.memcpy_dtoh);
    load(h, "cuMemsetD8_v2", d.memset_d8);
    try_load(h, "cuModuleLoadData", d.module_load_data);
    try_load(h, "cuModuleGetFunction", d.module_get_function);
    try_load(h, "cuLaunchKernel", d.launch_kernel);
    CUdevice dev = 0;
    CUcontext ctx = nullptr;
    check(d.init(0), "cuInit");
    check(d.device_get(&dev, 0), "cuDeviceGet(0)");
    check(d.device_get_name(d.device_name, sizeof d.device_name - 1, dev), "cuDeviceGetName");
    check(d.primary_retain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(d.ctx_set_current(ctx), "cuCtxSetCurrent");
    return d;
  }

  static void check(CUresult rc, const char* what) {
    if (rc == CUDA_SUCCESS) return;
    std::fprintf(stderr, "example: %s failed with CUresult %d; exiting\n", what,
                 static_cast<int>(rc));
    std::exit(1);
  }

private:
  template <class F> static void try_load(void* h, const char* name, F& out) {
    out = reinterpret_cast<F>(dlsym(h, name));
  }
  template <class F> static void load(void* h, const char* name, F& out) {
    try_load(h, name, out);
    if (out == nullptr) fail("libcuda.so.1 lacks", name);
  }
  [[noreturn]] static void fail(const char* what, const char* detail) {
    std::fprintf(stderr, "example: %s %s; exiting\n", what, detail ? detail : "");
    std::exit(1);
  }
};

} // namespace examples
