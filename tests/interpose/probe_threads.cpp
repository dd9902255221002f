// Reuse safety with many threads, each on a non-blocking stream of its own, kernels in flight
// (the GPU benchmark's shape, bench/stream_alloc_bench.cu, on the fake driver): blocks freed
// on one stream while its kernel still runs must not reach another stream before that kernel
// is done. Under a tight limit blocks keep moving between streams, through seals, waits,
// barriers and fences.
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "tests/interpose/probe_check.h"

namespace probe {

// Each op allocates on its thread's stream (stream-less one time in four), launches a "kernel"
// that sleeps and then stamps the block with the op's byte, and either frees the block at once
// (the kernel still sleeping: "fire") or waits for its stream and checks that every byte is
// still its own stamp ("check"): a block handed out while another stream's fired kernel was
// pending is overwritten after the stamp. Returns 3 when a check saw another op's byte.
// `capture`: a relaxed graph capture stays open on a stream of its own all along (the pool may
// then neither fence nor mark: either would invalidate it); prints whether it ended.
int scenario_hazard_threads(bool capture) {
  constexpr int k_threads = 8, k_ops = 300;
  std::atomic<int> corrupted{0}, errors{0};
  CUcontext ctx = nullptr;
  CHECK_CU(g.primary_retain(&ctx, 0));
  CUstream capturing = nullptr;
  if (capture) {
    CHECK_CU(g.stream_create(&capturing, CU_STREAM_NON_BLOCKING));
    CHECK_CU(g.stream_begin_capture(capturing, CU_STREAM_CAPTURE_MODE_RELAXED));
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t) {
    threads.emplace_back([t, ctx, &corrupted, &errors] {
      g.ctx_set_current(ctx);
      CUstream s = nullptr;
      if (g.stream_create(&s, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) {
        ++errors;
        return;
      }
      std::mt19937 rng(static_cast<unsigned>(t) * 7919u + 1);
      for (int i = 0; i < k_ops; ++i) {
        const bool stream_less = rng() % 4 == 0, check = rng() % 2 == 0;
        const std::size_t n = (64u << 10) + rng() % (1u << 20);
        const auto stamp = static_cast<unsigned char>(1 + (t * k_ops + i) % 251);
        CUdeviceptr p = 0;
        if ((stream_less ? g.mem_alloc(&p, n) : g.mem_alloc_async(&p, n, s)) != CUDA_SUCCESS) {
          ++errors;
          continue;
        }
        if (g.launch_kernel(s, static_cast<unsigned>(20 + rng() % 200), p, stamp, n) !=
            CUDA_SUCCESS)
          ++errors;
        if (check) {
          if (g.stream_synchronize(s) != CUDA_SUCCESS) ++errors;
          std::this_thread::sleep_for(std::chrono::microseconds(rng() % 100)); // late writes land
          const auto* bytes = reinterpret_cast<const unsigned char*>(p);
          for (std::size_t k = 0; k < n; k += 4096)
            if (bytes[k] != stamp || bytes[n - 1] != stamp) {
              ++corrupted;
              break;
            }
        }
        if ((stream_less ? g.mem_free(p) : g.mem_free_async(p, s)) != CUDA_SUCCESS) ++errors;
      }
      if (g.stream_synchronize(s) != CUDA_SUCCESS || g.stream_destroy(s) != CUDA_SUCCESS) ++errors;
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(errors == 0, "%d errors", errors.load());
  if (capture) {
    CUgraph graph = nullptr;
    std::printf("hazard_threads capture_ended=%d\n",
                g.stream_end_capture(capturing, &graph) == CUDA_SUCCESS ? 1 : 0);
  }
  std::printf("hazard_threads corrupted=%d\n", corrupted.load());
  return corrupted != 0 ? 3 : 0;
}

} // namespace probe
