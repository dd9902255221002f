// The tracing issue's C++ program: one thread, cudaMalloc + cudaFree pairs of log-uniform
// sizes 256 B - 4 MiB with 8 blocks live, no kernels; every pair timed, mean / p50 / p99 / max
// printed as one JSON line. Run it natively and under libgmem.so with GMEM_TRACE=0,
// GMEM_STACK_DEPTH=0 and the defaults (bench/trace_cost_gpu.sh does).
//   nvcc -O2 -arch=sm_90 bench/trace_cost.cu -o trace_cost && ./trace_cost [pairs] [label]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  const long pairs = argc > 1 ? std::atol(argv[1]) : 200000;
  const char* label = argc > 2 ? argv[2] : "run";
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> lg(8.0, 22.0);
  std::vector<void*> live(8, nullptr);
  for (auto& p : live)
    if (cudaMalloc(&p, static_cast<size_t>(std::exp2(lg(rng)))) != cudaSuccess) return 1;
  std::vector<double> ns(static_cast<size_t>(pairs));
  for (long i = 0; i < pairs; ++i) {
    const size_t bytes = static_cast<size_t>(std::exp2(lg(rng)));
    const size_t victim = static_cast<size_t>(i) % live.size();
    const auto t0 = std::chrono::steady_clock::now();
    void* p = nullptr;
    if (cudaMalloc(&p, bytes) != cudaSuccess || cudaFree(live[victim]) != cudaSuccess) {
      std::fprintf(stderr, "trace_cost: CUDA call failed at pair %ld\n", i);
      return 1;
    }
    const auto t1 = std::chrono::steady_clock::now();
    live[victim] = p;
    ns[static_cast<size_t>(i)] = std::chrono::duration<double, std::nano>(t1 - t0).count();
  }
  for (void* p : live)
    cudaFree(p);
  double sum = 0;
  for (double v : ns)
    sum += v;
  std::sort(ns.begin(), ns.end());
  std::printf("{\"kind\":\"trace_cost\",\"label\":\"%s\",\"pairs\":%ld,\"mean_ns\":%.1f,"
              "\"p50_ns\":%.1f,\"p99_ns\":%.1f,\"max_ns\":%.0f}\n",
              label, pairs, sum / static_cast<double>(ns.size()), ns[ns.size() / 2],
              ns[ns.size() * 99 / 100], ns.back());
  return 0;
}
