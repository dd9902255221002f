// Stand-ins for PyTorch's and cuBLAS's shared libraries, for the framework readers' end-to-end
// test (tests/tools/frameworks_e2e_test.sh): built three times (FAKE_LIB = 1, 2, 3) as
// libc10_cuda.so, libtorch_cuda.so and libcublas.so.13, with the real libraries' function
// names, so gmem recognises them from what the symbolizer reads in their symbol tables. Each
// reaches the driver as the real ones do (dlopen libcuda.so.1 + dlsym): under gmem run, through
// libgmem.so, against the fake driver.
#include <cuda.h>
#include <dlfcn.h>

#include <cstddef>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

template <typename F> F driver(const char* name) {
  static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  return lib != nullptr ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

[[maybe_unused]] __attribute__((noinline)) CUdeviceptr device_alloc(std::size_t bytes) {
  CUdeviceptr p = 0;
  const auto alloc = driver<CUresult (*)(CUdeviceptr*, std::size_t)>("cuMemAlloc_v2");
  return alloc != nullptr && alloc(&p, bytes) == CUDA_SUCCESS ? p : 0;
}

} // namespace

#if FAKE_LIB == 1 // libc10_cuda.so: PyTorch's caching allocator grows by a segment

namespace c10::cuda::CUDACachingAllocator::Native {
class DeviceCachingAllocator {
public:
  __attribute__((noinline)) CUdeviceptr malloc(std::size_t bytes) { return device_alloc(bytes); }
};
} // namespace c10::cuda::CUDACachingAllocator::Native

FAKE_EXPORT CUdeviceptr fake_c10_cuda_segment(std::size_t bytes) {
  static c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator allocator;
  return allocator.malloc(bytes);
}

#elif FAKE_LIB == 2 // libtorch_cuda.so: PyTorch's pinned host cache

namespace at::cuda {
class CUDACachingHostAllocatorImpl {
public:
  __attribute__((noinline)) void* allocate_host_memory_slowpath(std::size_t bytes) {
    void* p = nullptr;
    const auto alloc = driver<CUresult (*)(void**, std::size_t, unsigned)>("cuMemHostAlloc");
    return alloc != nullptr && alloc(&p, bytes, 0) == CUDA_SUCCESS ? p : nullptr;
  }
};
} // namespace at::cuda

FAKE_EXPORT void* fake_torch_cuda_pinned(std::size_t bytes) {
  static at::cuda::CUDACachingHostAllocatorImpl allocator;
  return allocator.allocate_host_memory_slowpath(bytes);
}

#elif FAKE_LIB == 3 // libcublas.so.13: a handle's workspace

FAKE_EXPORT int cublasCreate_v2(CUdeviceptr* workspace) {
  *workspace = device_alloc(4u << 20);
  return *workspace != 0 ? 0 : 1;
}

#else
#error "FAKE_LIB must be 1, 2 or 3"
#endif
