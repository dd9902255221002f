// DESIGN.md "Reuse safety" on the real driver: a slow kernel on a non-blocking stream writes a
// buffer ~200 ms after the program freed it; a new allocation of the same size is zeroed on
// another stream and read back. The driver's cudaFree synchronizes, so without gmem the result
// is all zeros; gmem must keep that true. Argument "async": the stream-ordered variant
// (cudaMallocAsync/cudaFreeAsync on the slow stream, the new one on another stream).
// Exit: 0 clean, 3 corrupted, 1 error.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#define CHECK(call)                                                                                \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      std::printf("reuse_hazard: FAIL %s: %s\n", #call, cudaGetErrorString(e_));                   \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

__global__ void late_write(unsigned char* p, std::size_t n, long long delay_cycles) {
  if (threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < delay_cycles) {
    }
  }
  __syncthreads();
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = 0xAA;
}

int main(int argc, char** argv) {
  const bool async = argc > 1 && std::strcmp(argv[1], "async") == 0;
  constexpr std::size_t n = 4u << 20;
  cudaStream_t slow, other;
  CHECK(cudaStreamCreateWithFlags(&slow, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const long long delay = static_cast<long long>(clock_khz) * 200; // ~200 ms
  unsigned char *a = nullptr, *b = nullptr;
  if (async) {
    CHECK(cudaMallocAsync(&a, n, slow));
  } else {
    CHECK(cudaMalloc(&a, n));
  }
  late_write<<<1, 256, 0, slow>>>(a, n, delay);
  if (async) {
    CHECK(cudaFreeAsync(a, slow));
    CHECK(cudaMallocAsync(&b, n, other));
  } else {
    CHECK(cudaFree(a));
    CHECK(cudaMalloc(&b, n));
  }
  CHECK(cudaMemsetAsync(b, 0, n, other));
  CHECK(cudaStreamSynchronize(other));
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> host(n);
  CHECK(cudaMemcpy(host.data(), b, n, cudaMemcpyDeviceToHost));
  std::size_t bad = 0;
  for (unsigned char c : host)
    bad += c != 0;
  std::printf("reuse_hazard%s: reused=%d corrupted_bytes=%zu\n", async ? " async" : "", a == b,
              bad);
  return bad != 0 ? 3 : 0;
}
