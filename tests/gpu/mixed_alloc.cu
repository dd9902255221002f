// Mixed runtime allocation work on several streams, checked: cudaMalloc/cudaFree,
// cudaMallocAsync/cudaFreeAsync and cudaMallocHost/cudaFreeHost of random sizes, with kernels
// that fill and combine buffers. Built twice (nvcc's default static runtime and -cudart shared)
// and run with and without libgmem.so; prints "mixed_alloc: OK" or the first mismatch.
// With two or more GPUs it also runs the work on device 1 and frees across devices' contexts.
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(call)                                                                                \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::printf("mixed_alloc: FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call,                   \
                  cudaGetErrorString(e_));                                                         \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

__global__ void fill(unsigned* p, std::size_t n, unsigned seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = seed * 2654435761u + static_cast<unsigned>(i);
}
__global__ void add(const unsigned* a, const unsigned* b, unsigned* c, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    c[i] = a[i] + b[i];
}

struct job {
  unsigned *a = nullptr, *b = nullptr, *c = nullptr;
  unsigned* host = nullptr;
  std::size_t n = 0;
  unsigned sa = 0, sb = 0;
  int kind = 0; // 0 cudaMalloc, 1 cudaMallocAsync
  cudaStream_t s = nullptr;
};

int run_device(int device, int rounds) {
  CHECK(cudaSetDevice(device));
  constexpr int k_streams = 4;
  cudaStream_t streams[k_streams];
  for (auto& s : streams)
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::mt19937 rng(1234 + device);
  int errors = 0;
  for (int round = 0; round < rounds; ++round) {
    std::vector<job> jobs(24);
    for (auto& j : jobs) {
      j.n = 1 + rng() % (rng() % 4 == 0 ? (8u << 20) : (64u << 10)); // elements
      j.kind = static_cast<int>(rng() % 2);
      j.s = streams[rng() % k_streams];
      j.sa = rng();
      j.sb = rng();
      const std::size_t bytes = j.n * sizeof(unsigned);
      if (j.kind == 0) {
        CHECK(cudaMalloc(&j.a, bytes));
        CHECK(cudaMalloc(&j.b, bytes));
        CHECK(cudaMalloc(&j.c, bytes));
      } else {
        CHECK(cudaMallocAsync(&j.a, bytes, j.s));
        CHECK(cudaMallocAsync(&j.b, bytes, j.s));
        CHECK(cudaMallocAsync(&j.c, bytes, j.s));
      }
      CHECK(cudaMallocHost(&j.host, bytes));
      fill<<<64, 256, 0, j.s>>>(j.a, j.n, j.sa);
      fill<<<64, 256, 0, j.s>>>(j.b, j.n, j.sb);
      add<<<64, 256, 0, j.s>>>(j.a, j.b, j.c, j.n);
      CHECK(cudaMemcpyAsync(j.host, j.c, bytes, cudaMemcpyDeviceToHost, j.s));
      if (j.kind == 1) {
        CHECK(cudaFreeAsync(j.a, j.s));
        CHECK(cudaFreeAsync(j.b, j.s));
      }
    }
    for (auto& j : jobs) {
      CHECK(cudaStreamSynchronize(j.s));
      for (std::size_t i = 0; i < j.n; i += 1 + j.n / 64) {
        const unsigned want = (j.sa * 2654435761u + static_cast<unsigned>(i)) +
                              (j.sb * 2654435761u + static_cast<unsigned>(i));
        if (j.host[i] != want && errors++ < 5) {
          std::printf("mixed_alloc: FAIL device %d round %d element %zu: %u != %u\n", device, round,
                      i, j.host[i], want);
        }
      }
      if (j.kind == 0) {
        CHECK(cudaFree(j.a));
        CHECK(cudaFree(j.b));
        CHECK(cudaFree(j.c));
      } else {
        CHECK(cudaFreeAsync(j.c, j.s));
      }
      CHECK(cudaFreeHost(j.host));
    }
  }
  // Mapped pinned memory (cuMemHostAlloc with DEVICEMAP): the device pointer of a pooled
  // block, written by a kernel, read on the host.
  for (int i = 0; i < 20; ++i) {
    const std::size_t n = 1000 + 3000 * static_cast<std::size_t>(i);
    unsigned* host = nullptr;
    unsigned* dev = nullptr;
    CHECK(cudaHostAlloc(&host, n * sizeof(unsigned), cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), host, 0));
    fill<<<8, 256, 0, streams[0]>>>(dev, n, static_cast<unsigned>(i));
    CHECK(cudaStreamSynchronize(streams[0]));
    for (std::size_t k = 0; k < n; k += 97) {
      if (host[k] != static_cast<unsigned>(i) * 2654435761u + static_cast<unsigned>(k) &&
          errors++ < 5) {
        std::printf("mixed_alloc: FAIL mapped host block %d element %zu\n", i, k);
      }
    }
    CHECK(cudaFreeHost(host));
  }
  CHECK(cudaDeviceSynchronize());
  for (auto& s : streams)
    CHECK(cudaStreamDestroy(s));
  return errors;
}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  int errors = run_device(0, 30);
  if (count >= 2) {
    errors += run_device(1, 10);
    // A device-0 buffer freed while device 1 is current.
    void* p = nullptr;
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc(&p, 1 << 20));
    CHECK(cudaSetDevice(1));
    CHECK(cudaFree(p));
    std::printf("mixed_alloc: two devices exercised\n");
  }
  if (errors != 0) return 1;
  std::printf("mixed_alloc: OK\n");
  return 0;
}
