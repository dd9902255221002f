// Cost of one alloc+free pair, median over batches, for the paths docs/design.md's anchor table
// compares: cudaMalloc/cudaFree, cuMemAlloc_v2/cuMemFree_v2 (fetched through the runtime's
// cudaGetDriverEntryPointByVersion, i.e. cuGetProcAddress), cudaMallocAsync/cudaFreeAsync with
// the pool kept, and CUB's CachingDeviceAllocator. Run it plain and under libgmem.so.
// Output: one line per path: "bench PATH size=... median_ns=..." (random: ns per operation).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include <cub/util_allocator.cuh>
#include <cuda.h>
#include <cuda_runtime.h>

namespace {

using clock_type = std::chrono::steady_clock;
using alloc_fn = std::function<void*(std::size_t)>;
using free_fn = std::function<void(void*)>;

CUresult (*g_cu_alloc)(CUdeviceptr*, std::size_t) = nullptr;
CUresult (*g_cu_free)(CUdeviceptr) = nullptr;
cudaStream_t g_stream = nullptr;
cub::CachingDeviceAllocator* g_cub = nullptr;

struct path {
  const char* name;
  alloc_fn alloc;
  free_fn release;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double pair_ns(const path& p, std::size_t bytes, int batch, int batches) {
  for (int i = 0; i < 3; ++i)
    p.release(p.alloc(bytes)); // warm
  std::vector<double> per_pair;
  for (int b = 0; b < batches; ++b) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < batch; ++i)
      p.release(p.alloc(bytes));
    const auto t1 = clock_type::now();
    per_pair.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / batch);
  }
  return median(per_pair);
}

// Log-uniform sizes 512 B .. 64 MiB, up to 64 live, random frees: ns per operation.
double random_ns(const path& p, int ops) {
  std::mt19937 rng(42);
  std::vector<std::pair<void*, std::size_t>> live;
  std::vector<double> per_op;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < ops; ++i) {
      if (live.size() < 64 && (live.empty() || rng() % 2 == 0)) {
        const double e = 9.0 + (26.0 - 9.0) * (rng() / double(UINT32_MAX));
        const auto bytes = static_cast<std::size_t>(std::pow(2.0, e));
        live.push_back({p.alloc(bytes), bytes});
      } else {
        const std::size_t k = rng() % live.size();
        p.release(live[k].first);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
    }
    const auto t1 = clock_type::now();
    per_op.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / ops);
  }
  for (auto& l : live)
    p.release(l.first);
  return median(per_op);
}

void check_free(cudaError_t e, const char* what) {
  static int reported = 0;
  if (e != cudaSuccess && reported++ < 3)
    std::printf("bench: %s failed: %s\n", what, cudaGetErrorString(e));
}

void must(cudaError_t e) {
  if (e != cudaSuccess) {
    std::printf("bench: FAIL %s\n", cudaGetErrorString(e));
    std::exit(1);
  }
}

} // namespace

int main(int argc, char** argv) {
  // alloc_bench [quick|full] [PATH] [random]: PATH runs one path only; "random" only the mix.
  const bool quick = argc > 1 && std::strcmp(argv[1], "quick") == 0;
  const char* only = argc > 2 ? argv[2] : nullptr;
  const bool random_only = argc > 3 && std::strcmp(argv[3], "random") == 0;
  cudaFree(nullptr);
  cudaDriverEntryPointQueryResult q;
  cudaGetDriverEntryPointByVersion("cuMemAlloc", reinterpret_cast<void**>(&g_cu_alloc), 12000,
                                   cudaEnableDefault, &q);
  cudaGetDriverEntryPointByVersion("cuMemFree", reinterpret_cast<void**>(&g_cu_free), 12000,
                                   cudaEnableDefault, &q);
  cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking);
  cudaMemPool_t mempool;
  cudaDeviceGetDefaultMemPool(&mempool, 0);
  std::uint64_t keep = UINT64_MAX;
  cudaMemPoolSetAttribute(mempool, cudaMemPoolAttrReleaseThreshold, &keep);
  g_cub = new cub::CachingDeviceAllocator(2, 9, 28, cub::CachingDeviceAllocator::INVALID_SIZE);

  const std::vector<path> paths = {
      {"cudaMalloc",
       [](std::size_t n) {
         void* p = nullptr;
         must(cudaMalloc(&p, n));
         return p;
       },
       [](void* p) { check_free(cudaFree(p), "cudaFree"); }},
      {"cuMemAlloc_v2",
       [](std::size_t n) {
         CUdeviceptr p = 0;
         if (g_cu_alloc(&p, n) != CUDA_SUCCESS) must(cudaErrorMemoryAllocation);
         return reinterpret_cast<void*>(p);
       },
       [](void* p) {
         if (g_cu_free(reinterpret_cast<CUdeviceptr>(p)) != CUDA_SUCCESS)
           check_free(cudaErrorInvalidValue, "cuMemFree_v2");
       }},
      {"cudaMallocAsync",
       [](std::size_t n) {
         void* p = nullptr;
         must(cudaMallocAsync(&p, n, g_stream));
         return p;
       },
       [](void* p) { check_free(cudaFreeAsync(p, g_stream), "cudaFreeAsync"); }},
      {"cub::CachingDeviceAllocator",
       [](std::size_t n) {
         void* p = nullptr;
         must(g_cub->DeviceAllocate(&p, n, g_stream));
         return p;
       },
       [](void* p) { check_free(g_cub->DeviceFree(p), "DeviceFree"); }},
  };
  {
    CUresult (*get_current)(CUcontext*) = nullptr;
    cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", reinterpret_cast<void**>(&get_current),
                                     12000, cudaEnableDefault, &q);
    CUcontext ctx = nullptr;
    const auto t0 = clock_type::now();
    for (int i = 0; i < 1000000; ++i)
      get_current(&ctx);
    const auto t1 = clock_type::now();
    std::printf("bench cuCtxGetCurrent size=0 median_ns=%.1f\n",
                std::chrono::duration<double, std::nano>(t1 - t0).count() / 1e6);
  }
  const std::size_t sizes[] = {512, 1u << 20, 16u << 20, 256u << 20};
  for (const path& p : paths) {
    if (only != nullptr && std::strcmp(only, p.name) != 0) continue;
    for (std::size_t s : sizes) {
      if (random_only) break;
      const bool slow =
          std::strcmp(p.name, "cudaMalloc") == 0 || std::strcmp(p.name, "cuMemAlloc_v2") == 0;
      const int batch = quick ? 20 : (slow && s >= (16u << 20) ? 20 : 500);
      std::printf("bench %s size=%zu median_ns=%.0f\n", p.name, s,
                  pair_ns(p, s, batch, quick ? 5 : 15));
      std::fflush(stdout);
    }
    std::printf("bench %s size=random median_ns=%.0f\n", p.name, random_ns(p, quick ? 100 : 2000));
    std::fflush(stdout);
  }
  cudaDeviceSynchronize();
  return 0;
}
