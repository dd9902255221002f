// cudaFree and cudaMalloc as barriers (GMEM_STRICT, interpose/strict_mode.h).
//   strict_barrier free   a kernel on a non-blocking stream spins ~50 ms, then writes mapped
//                         pinned host memory; the program frees an unrelated buffer and reads
//                         the memory at once, 5 rounds. Exit 0 when every round saw the
//                         kernel's value, 3 when one was stale.
//   strict_barrier alloc  a slow kernel on stream 1 writes 1, cudaMalloc, a fast kernel on
//                         stream 2 writes 2; prints which landed last ("last=2": ordered).
//   strict_barrier bench  cudaMalloc(512)+cudaFree pairs: idle device, and with a 2 ms kernel
//                         in flight on another stream; prints microseconds per pair.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                                \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

__global__ void spin_then_write(volatile int* out, int value, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  *out = value;
  __threadfence_system();
}

long long cycles_for_ms(double ms) {
  int khz = 0;
  CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0));
  return static_cast<long long>(ms * khz);
}

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int run_free() {
  int* host = nullptr;
  CHECK(cudaHostAlloc(&host, sizeof(int), cudaHostAllocMapped));
  int* dev_view = nullptr;
  CHECK(cudaHostGetDevicePointer(&dev_view, host, 0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int stale = 0;
  for (int round = 1; round <= 5; ++round) {
    *reinterpret_cast<volatile int*>(host) = 0;
    void* unrelated = nullptr;
    CHECK(cudaMalloc(&unrelated, 1 << 20));
    spin_then_write<<<1, 1, 0, s>>>(dev_view, round, cycles_for_ms(50));
    CHECK(cudaGetLastError());
    const double t0 = now_us();
    CHECK(cudaFree(unrelated)); // the program's barrier
    const double waited = now_us() - t0;
    const int seen = *reinterpret_cast<volatile int*>(host);
    std::printf("strict_barrier free round=%d seen=%d expected=%d free_us=%.0f\n", round, seen,
                round, waited);
    stale += seen != round;
    CHECK(cudaStreamSynchronize(s));
  }
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFreeHost(host));
  std::printf("strict_barrier free stale_rounds=%d\n", stale);
  return stale == 0 ? 0 : 3;
}

int run_alloc() {
  int* x = nullptr;
  CHECK(cudaMalloc(&x, sizeof(int)));
  CHECK(cudaMemset(x, 0, sizeof(int)));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  spin_then_write<<<1, 1, 0, s1>>>(x, 1, cycles_for_ms(50));
  void* other = nullptr;
  CHECK(cudaMalloc(&other, 1000));
  spin_then_write<<<1, 1, 0, s2>>>(x, 2, 0);
  CHECK(cudaDeviceSynchronize());
  int last = 0;
  CHECK(cudaMemcpy(&last, x, sizeof last, cudaMemcpyDeviceToHost));
  std::printf("strict_barrier alloc last=%d\n", last);
  CHECK(cudaFree(other));
  CHECK(cudaFree(x));
  return 0;
}

int run_bench() {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 512)); // warm-up: context, pool
  CHECK(cudaFree(p));
  const int idle_pairs = 20000;
  double t0 = now_us();
  for (int i = 0; i < idle_pairs; ++i) {
    CHECK(cudaMalloc(&p, 512));
    CHECK(cudaFree(p));
  }
  const double idle = (now_us() - t0) / idle_pairs;
  int* sink = nullptr;
  CHECK(cudaMalloc(&sink, sizeof(int)));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int busy_pairs = 50;
  double busy_total = 0;
  for (int i = 0; i < busy_pairs; ++i) {
    spin_then_write<<<1, 1, 0, s>>>(sink, i, cycles_for_ms(2));
    t0 = now_us();
    CHECK(cudaMalloc(&p, 512));
    CHECK(cudaFree(p));
    busy_total += now_us() - t0;
    CHECK(cudaStreamSynchronize(s));
  }
  std::printf("strict_barrier bench idle_pair_us=%.3f busy_pair_us=%.1f (2 ms kernel in flight)\n",
              idle, busy_total / busy_pairs);
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(sink));
  return 0;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: strict_barrier free|alloc|bench\n");
    return 2;
  }
  if (std::strcmp(argv[1], "free") == 0) return run_free();
  if (std::strcmp(argv[1], "alloc") == 0) return run_alloc();
  if (std::strcmp(argv[1], "bench") == 0) return run_bench();
  std::fprintf(stderr, "strict_barrier: unknown mode %s\n", argv[1]);
  return 2;
}
