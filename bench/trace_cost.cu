// The tracing issue's C++ program: one thread, cudaMalloc + cudaFree pairs of log-uniform
// sizes 256 B - 4 MiB with 8 blocks live, no kernels; every pair timed, mean / p50 / p90 / p95 /
// p99 / p99.9 / max printed as one JSON line. Run it natively and under libgmem.so with
// GMEM_TRACE=0, GMEM_STACK_DEPTH=0 and the defaults (bench/trace_cost_gpu.sh does).
//   nvcc -O2 -arch=sm_90 -I. bench/trace_cost.cu -lcuda -o trace_cost
//   ./trace_cost [pairs] [label] [runtime|driver|async|timer] [split]
// The route: runtime (default) calls cudaMalloc/cudaFree; driver calls cuMemAlloc/cuMemFree,
// which is what the runtime calls, so under gmem the two differ by the runtime's own layer
// (gmem's hooks and pool do the same work below both); async calls cudaMallocAsync /
// cudaFreeAsync on one non-blocking stream made up front (the stream-ordered path); timer times
// nothing (the clock pair).
// split (under gmem only): reads gmem's fence counter (gmem_stats) before and after each pair,
// outside the timed span, and prints two more lines: the pairs during which the pool fenced and
// the others, so a tail can be told apart from the fences.
#include "include/gmem/gmem.h"

#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

namespace {

void print(const char* label, std::vector<double> ns) {
  if (ns.empty()) return;
  double sum = 0;
  for (double v : ns)
    sum += v;
  std::sort(ns.begin(), ns.end());
  auto at = [&](double q) { return ns[static_cast<size_t>(q * static_cast<double>(ns.size()))]; };
  std::printf("{\"kind\":\"trace_cost\",\"label\":\"%s\",\"pairs\":%zu,\"mean_ns\":%.1f,"
              "\"p50_ns\":%.1f,\"p90_ns\":%.1f,\"p95_ns\":%.1f,\"p99_ns\":%.1f,"
              "\"p999_ns\":%.1f,\"max_ns\":%.0f}\n",
              label, ns.size(), sum / static_cast<double>(ns.size()), at(0.50), at(0.90), at(0.95),
              at(0.99), at(0.999), ns.back());
}

} // namespace

int main(int argc, char** argv) {
  const long pairs = argc > 1 ? std::atol(argv[1]) : 200000;
  const char* label = argc > 2 ? argv[2] : "run";
  const std::string name = argc > 3 ? argv[3] : "runtime";
  const bool split = argc > 4 && std::string(argv[4]) == "split";
  if (pairs <= 0 || (argc > 4 && !split)) {
    std::fprintf(stderr,
                 "usage: trace_cost [pairs > 0] [label] [runtime|driver|async|timer] [split]\n");
    return 2;
  }
  enum class route { runtime, driver, async, timer } r = route::runtime;
  if (name == "driver") {
    r = route::driver;
  } else if (name == "async") {
    r = route::async;
  } else if (name == "timer") {
    r = route::timer;
  } else if (name != "runtime") {
    std::fprintf(stderr, "trace_cost: the route is runtime, driver, async or timer, not '%s'\n",
                 name.c_str());
    return 2;
  }
  using stats_fn = gmem_status (*)(int, gmem_stats_t*);
  const auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "gmem_stats"));
  if (split && stats == nullptr) {
    std::fprintf(stderr, "trace_cost: split needs gmem (LD_PRELOAD=libgmem.so)\n");
    return 2;
  }
  auto fences = [stats] {
    gmem_stats_t st{};
    st.struct_size = sizeof st;
    return stats(0, &st) == GMEM_OK ? st.fences : 0;
  };
  if (cudaFree(nullptr) != cudaSuccess) return 1; // the primary context, current on this thread
  cudaStream_t stream = nullptr;
  if (r == route::async && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess)
    return 1;
  auto alloc = [r, stream](void** p, size_t bytes) {
    if (r == route::runtime) return cudaMalloc(p, bytes) == cudaSuccess;
    if (r == route::async) return cudaMallocAsync(p, bytes, stream) == cudaSuccess;
    CUdeviceptr d = 0;
    const bool ok = cuMemAlloc(&d, bytes) == CUDA_SUCCESS;
    *p = reinterpret_cast<void*>(d);
    return ok;
  };
  auto release = [r, stream](void* p) {
    if (r == route::runtime) return cudaFree(p) == cudaSuccess;
    if (r == route::async) return cudaFreeAsync(p, stream) == cudaSuccess;
    return cuMemFree(reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS;
  };
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> lg(8.0, 22.0);
  std::vector<void*> live(8, nullptr);
  for (auto& p : live)
    if (!alloc(&p, static_cast<size_t>(std::exp2(lg(rng))))) return 1;
  std::vector<double> ns(static_cast<size_t>(pairs)), fenced, other;
  for (long i = 0; i < pairs; ++i) {
    const size_t bytes = static_cast<size_t>(std::exp2(lg(rng)));
    const size_t victim = static_cast<size_t>(i) % live.size();
    const std::uint64_t f0 = split ? fences() : 0;
    const auto t0 = std::chrono::steady_clock::now();
    void* p = live[victim];
    if (r != route::timer && (!alloc(&p, bytes) || !release(live[victim]))) {
      std::fprintf(stderr, "trace_cost: CUDA call failed at pair %ld\n", i);
      return 1;
    }
    const auto t1 = std::chrono::steady_clock::now();
    live[victim] = p;
    const double t = std::chrono::duration<double, std::nano>(t1 - t0).count();
    ns[static_cast<size_t>(i)] = t;
    if (split) (fences() != f0 ? fenced : other).push_back(t);
  }
  for (void* p : live)
    release(p);
  if (stream != nullptr &&
      (cudaStreamSynchronize(stream) != cudaSuccess || cudaStreamDestroy(stream) != cudaSuccess)) {
    return 1;
  }
  print(label, std::move(ns));
  if (split) {
    print((std::string(label) + ", pairs that fenced").c_str(), std::move(fenced));
    print((std::string(label) + ", pairs that did not").c_str(), std::move(other));
  }
  return 0;
}
