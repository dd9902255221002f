// A small "inference pipeline" with three deliberate leaks and a fragmentation pattern, for
// `gmem leaks` and `gmem frag` to find (make demo runs it under `gmem run`).
//
// Leak sites (each a distinct call stack):
//   1. reload_weights()       drops the old weights without freeing them (3 x 8 MiB);
//   2. cache_frame_features() keeps one 256 KiB feature map per frame forever (40 x);
//   3. run_batch()            returns early on "bad input" (every 7th batch) before freeing its
//                             1 MiB scratch buffer.
// (The index buffers of the fragmentation pattern stay live until exit on purpose, so
// `gmem frag` has something to show; `gmem leaks` lists them as a fourth, larger site.)
// Fragmentation: 24 long-lived 1.5 MiB "index" buffers are interleaved with 24 x 4 MiB
// temporaries (both in gmem's large-request segments); freeing the temporaries leaves 96 MiB
// free in 4 MiB holes, so an 8 MiB request cannot use any of it and maps a new segment.
//
// Usage: leaky_pipeline [--hold SECONDS]   (stay alive at the end, for `gmem top/leaks PID`)
#include "examples/cuda_driver.h"
#include "gmem/gmem.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

examples::cuda_driver g_cu;

CUdeviceptr alloc(std::size_t bytes, const char* what) {
  CUdeviceptr p = 0;
  examples::cuda_driver::check(g_cu.mem_alloc(&p, bytes), what);
  examples::cuda_driver::check(g_cu.memset_d8(p, 0, bytes), "cuMemsetD8");
  return p;
}

// Code after the call, so the compiler cannot turn it into a tail call and drop this
// function's frame from the recorded stack.
inline void keep_frame() {
  asm volatile("" ::: "memory");
}

// Leak site 1: the previous weights are forgotten, not freed.
__attribute__((noinline)) CUdeviceptr reload_weights(CUdeviceptr /*old*/) {
  const CUdeviceptr w = alloc(8u << 20, "cuMemAlloc(weights)");
  keep_frame();
  return w;
}

// Leak site 2: a cache that only grows.
__attribute__((noinline)) void cache_frame_features(std::vector<CUdeviceptr>& cache) {
  cache.push_back(alloc(256u << 10, "cuMemAlloc(features)"));
  keep_frame();
}

// Leak site 3: the early return skips the free.
__attribute__((noinline)) bool run_batch(int batch) {
  CUdeviceptr scratch = alloc(1u << 20, "cuMemAlloc(scratch)");
  if (batch % 7 == 3) return false; // "bad input": scratch leaks
  g_cu.mem_free(scratch);
  return true;
}

__attribute__((noinline)) void fragment_memory(std::vector<CUdeviceptr>& index) {
  std::vector<CUdeviceptr> temps;
  for (int i = 0; i < 24; ++i) {
    temps.push_back(alloc(4u << 20, "cuMemAlloc(temporary)"));
    index.push_back(alloc(3u << 19, "cuMemAlloc(index)"));
  }
  for (CUdeviceptr t : temps)
    g_cu.mem_free(t);
  examples::cuda_driver::check(g_cu.ctx_synchronize(), "cuCtxSynchronize");
  CUdeviceptr big = alloc(8u << 20, "cuMemAlloc(8 MiB after fragmentation)");
  g_cu.mem_free(big);
}

} // namespace

int main(int argc, char** argv) {
  int hold_s = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--hold") == 0 && i + 1 < argc) {
      hold_s = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: leaky_pipeline [--hold SECONDS]\n");
      return 2;
    }
  }
  g_cu = examples::cuda_driver::open();
  std::printf("leaky_pipeline: device 0 = %s; gmem pool %s\n", g_cu.device_name,
              gmem_available() ? "active" : "not preloaded (driver figures only)");

  gmem_mark("leaky_pipeline: start");
  CUdeviceptr weights = 0;
  for (int r = 0; r < 3; ++r)
    weights = reload_weights(weights);
  (void)weights;

  std::vector<CUdeviceptr> cache;
  int bad = 0;
  for (int frame = 0; frame < 40; ++frame) {
    cache_frame_features(cache);
    if (!run_batch(frame)) ++bad;
  }
  gmem_mark("leaky_pipeline: frames done");

  std::vector<CUdeviceptr> index;
  fragment_memory(index);
  gmem_mark("leaky_pipeline: fragmented");
  examples::cuda_driver::check(g_cu.ctx_synchronize(), "cuCtxSynchronize");

  std::printf("leaky_pipeline: leaked on purpose: 3 x 8 MiB weights, 40 x 256 KiB features, "
              "%d x 1 MiB scratch; %zu x 1.5 MiB index buffers still live\n",
              bad, index.size());
  char report[8192];
  if (gmem_memory_report(report, sizeof report) == GMEM_OK) std::fputs(report, stdout);
  if (hold_s > 0) {
    std::printf("leaky_pipeline: holding for %d s (pid %d)\n", hold_s, static_cast<int>(getpid()));
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(hold_s));
  }
  return 0;
}
