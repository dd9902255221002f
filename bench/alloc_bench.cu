// Allocation cost of the CUDA allocators, one per run:
//   alloc_bench --method cudaMalloc|cuMemAlloc|cudaMallocAsync|cub [harness options]
// Built with nvcc's default static runtime, so that `LD_PRELOAD=libgmem.so alloc_bench
// --method cudaMalloc` measures gmem through the runtime (the static runtime reaches the
// driver through cuGetProcAddress) and `--method cuMemAlloc` measures it through the exported
// driver symbols (this file links -lcuda). See alloc_harness.h for the tests.
#include "alloc_harness.h"

#include <cub/util_allocator.cuh>
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

bool check(cudaError_t e, const char* what, std::size_t bytes) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "alloc_bench: %s(%zu bytes) failed: %s; this cell is marked failed\n", what,
               bytes, cudaGetErrorString(e));
  return false;
}

bool check(CUresult e, const char* what, std::size_t bytes) {
  if (e == CUDA_SUCCESS) return true;
  const char* s = nullptr;
  cuGetErrorString(e, &s);
  std::fprintf(stderr, "alloc_bench: %s(%zu bytes) failed: %s; this cell is marked failed\n", what,
               bytes, s ? s : "?");
  return false;
}

class runtime_allocator final : public gmem_bench::allocator_under_test {
public:
  const char* name() const override { return "cudaMalloc"; }
  void* allocate(std::size_t bytes, int) override {
    void* p = nullptr;
    return check(cudaMalloc(&p, bytes), "cudaMalloc", bytes) ? p : nullptr;
  }
  bool deallocate(void* p, std::size_t bytes, int) override {
    return check(cudaFree(p), "cudaFree", bytes);
  }
};

class driver_allocator final : public gmem_bench::allocator_under_test {
public:
  const char* name() const override { return "cuMemAlloc_v2"; }
  void thread_begin(int) override {
    CUcontext c = nullptr;
    cuDevicePrimaryCtxRetain(&c, 0);
    cuCtxSetCurrent(c);
  }
  void* allocate(std::size_t bytes, int) override {
    CUdeviceptr p = 0;
    return check(cuMemAlloc(&p, bytes), "cuMemAlloc_v2", bytes) ? reinterpret_cast<void*>(p)
                                                                : nullptr;
  }
  bool deallocate(void* p, std::size_t bytes, int) override {
    return check(cuMemFree(reinterpret_cast<CUdeviceptr>(p)), "cuMemFree_v2", bytes);
  }
};

// One non-blocking stream per thread; frees go back on the allocating thread's stream.
class streams {
public:
  explicit streams(std::size_t n) : s_(n, nullptr) {
    for (auto& s : s_)
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  }
  ~streams() {
    for (auto s : s_) {
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
    }
  }
  cudaStream_t operator[](int t) const { return s_[static_cast<std::size_t>(t)]; }

private:
  std::vector<cudaStream_t> s_;
};

class async_allocator final : public gmem_bench::allocator_under_test {
public:
  async_allocator() : streams_(64) {
    cudaMemPool_t pool;
    cudaDeviceGetDefaultMemPool(&pool, 0);
    std::uint64_t keep = UINT64_MAX; // never release cached memory at synchronization
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  const char* name() const override { return "cudaMallocAsync"; }
  void* allocate(std::size_t bytes, int t) override {
    void* p = nullptr;
    return check(cudaMallocAsync(&p, bytes, streams_[t]), "cudaMallocAsync", bytes) ? p : nullptr;
  }
  bool deallocate(void* p, std::size_t bytes, int t) override {
    return check(cudaFreeAsync(p, streams_[t]), "cudaFreeAsync", bytes);
  }

private:
  streams streams_;
};

// CUB's default bins stop at 2 MiB (8^7) and cache nothing larger; these bins (powers of two
// from 512 B to 256 MiB, 64 GiB cache) let it cache every size the benchmark asks for.
class cub_allocator final : public gmem_bench::allocator_under_test {
public:
  cub_allocator() : streams_(64), cub_(2, 9, 28, std::size_t{64} << 30, true) {}
  const char* name() const override { return "cub::CachingDeviceAllocator"; }
  void* allocate(std::size_t bytes, int t) override {
    void* p = nullptr;
    return check(cub_.DeviceAllocate(&p, bytes, streams_[t]), "CachingDeviceAllocator::Allocate",
                 bytes)
               ? p
               : nullptr;
  }
  bool deallocate(void* p, std::size_t bytes, int) override {
    return check(cub_.DeviceFree(p), "CachingDeviceAllocator::DeviceFree", bytes);
  }

private:
  streams streams_;
  cub::CachingDeviceAllocator cub_;
};

} // namespace

int main(int argc, char** argv) {
  gmem_bench::harness_options o;
  std::string method = "cudaMalloc";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--method") == 0) method = argv[i + 1];
  gmem_bench::parse_args(o, argc, argv);
  if (o.label.empty()) o.label = method;
  if (cudaFree(nullptr) != cudaSuccess || cuInit(0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "alloc_bench: no usable CUDA device; nothing measured\n");
    return 2;
  }
  std::unique_ptr<gmem_bench::allocator_under_test> a;
  if (method == "cudaMalloc")
    a = std::make_unique<runtime_allocator>();
  else if (method == "cuMemAlloc")
    a = std::make_unique<driver_allocator>();
  else if (method == "cudaMallocAsync")
    a = std::make_unique<async_allocator>();
  else if (method == "cub")
    a = std::make_unique<cub_allocator>();
  else {
    std::fprintf(stderr,
                 "alloc_bench: unknown --method '%s' (cudaMalloc, cuMemAlloc, cudaMallocAsync, "
                 "cub); nothing measured\n",
                 method.c_str());
    return 2;
  }
  gmem_bench::run_suite(*a, o);
  a.reset();
  return cudaDeviceSynchronize() == cudaSuccess ? 0 : 1;
}
