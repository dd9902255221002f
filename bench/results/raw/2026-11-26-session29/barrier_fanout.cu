// Session 29: can a barrier's per-stream driver calls run in parallel from several threads?
// 32 non-blocking streams (as cuDNN/PyTorch make), the legacy stream kept busy by a spinning
// kernel (the host runs ahead of the GPU, as in the convnet). One "barrier" = on each stream an
// event record and a legacy-stream wait for it, a hub record on the legacy stream, and on each
// stream a wait for the hub (interpose/stream_registry.cpp's steps 2-4, all streams busy).
// Timed: the whole barrier on 1 thread, and with its per-stream steps split across T threads
// woken through a condition variable (the caller waits for them).
//   nvcc -O2 -std=c++17 -arch=sm_90 barrier_fanout.cu -lcuda -o barrier_fanout
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      std::printf("%s failed %d\n", #x, r_);                                                       \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

__global__ void spin(long long ns) {
  long long t0 = clock64();
  while (clock64() - t0 < ns) {
  }
}

constexpr int k_streams = 32;
CUstream g_s[k_streams];
CUevent g_ev[k_streams];
CUevent g_hub;
CUcontext g_ctx;

void step2(int i) {
  CK(cuEventRecord(g_ev[i], g_s[i]));
  CK(cuStreamWaitEvent(CU_STREAM_LEGACY, g_ev[i], 0));
}
void step4(int i) {
  CK(cuStreamWaitEvent(g_s[i], g_hub, 0));
}

struct fanout {
  int threads;
  std::mutex mu;
  std::condition_variable cv, done_cv;
  int phase = 0; // 1: step 2, 2: step 4
  long generation = 0;
  int done = 0;
  bool stop = false;
  std::vector<std::thread> pool;
  explicit fanout(int t) : threads(t) {
    for (int k = 1; k < t; ++k)
      pool.emplace_back([this, k] { run(k); });
  }
  ~fanout() {
    {
      std::lock_guard l(mu);
      stop = true;
      ++generation;
    }
    cv.notify_all();
    for (auto& t : pool)
      t.join();
  }
  void part(int k, int ph) {
    for (int i = k; i < k_streams; i += threads)
      ph == 1 ? step2(i) : step4(i);
  }
  void run(int k) {
    CK(cuCtxSetCurrent(g_ctx));
    long seen = 0;
    for (;;) {
      int ph;
      {
        std::unique_lock l(mu);
        cv.wait(l, [&] { return generation != seen; });
        seen = generation;
        if (stop) return;
        ph = phase;
      }
      part(k, ph);
      {
        std::lock_guard l(mu);
        ++done;
      }
      done_cv.notify_one();
    }
  }
  void go(int ph) {
    if (threads == 1) {
      part(0, ph);
      return;
    }
    {
      std::lock_guard l(mu);
      phase = ph;
      done = 0;
      ++generation;
    }
    cv.notify_all();
    part(0, ph);
    std::unique_lock l(mu);
    done_cv.wait(l, [&] { return done == threads - 1; });
  }
};

int main() {
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&g_ctx, dev));
  CK(cuCtxSetCurrent(g_ctx));
  for (int i = 0; i < k_streams; ++i) {
    CK(cuStreamCreate(&g_s[i], CU_STREAM_NON_BLOCKING));
    CK(cuEventCreate(&g_ev[i], CU_EVENT_DISABLE_TIMING));
  }
  CK(cuEventCreate(&g_hub, CU_EVENT_DISABLE_TIMING));
  for (int threads : {1, 2, 4, 8, 1, 2, 4, 8}) {
    fanout f(threads);
    std::vector<double> us;
    for (int round = 0; round < 400; ++round) {
      if (round % 50 == 0) {
        CK(cuCtxSynchronize());
        spin<<<1, 1>>>(50000000LL); // ~25 ms of GPU time on the legacy stream
      }
      auto t0 = std::chrono::steady_clock::now();
      f.go(1);
      CK(cuEventRecord(g_hub, CU_STREAM_LEGACY));
      f.go(2);
      auto t1 = std::chrono::steady_clock::now();
      us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(us.begin(), us.end());
    double mean = 0;
    for (double v : us)
      mean += v;
    mean /= us.size();
    std::printf("threads %d: barrier over %d busy streams: mean %.1f us, p50 %.1f, p99 %.1f\n",
                threads, k_streams, mean, us[us.size() / 2], us[us.size() * 99 / 100]);
    CK(cuCtxSynchronize());
  }
  return 0;
}
