// docs/design.md "Reuse safety" on the real driver: a slow kernel writes a buffer ~200 ms after the
// program freed it; a new allocation of the same size is written on another stream and read
// back. The driver's cudaFree synchronizes, so without gmem the new owner's value always wins;
// gmem must keep that true.
//   reuse_hazard [sync]          cudaMalloc/cudaFree, slow kernel on a non-blocking stream, the
//                                new block zeroed on another non-blocking stream
//   reuse_hazard async           cudaMallocAsync/cudaFreeAsync on the slow stream, the new one
//                                on another stream
//   reuse_hazard barrier OLD NEW the old owner's slow kernel on stream OLD, cudaFree, cudaMalloc
//                                of the same size (32 MiB: gmem hands back the same address
//                                after a pool fence, with GMEM_BARRIERS=1 a device-side
//                                barrier), the new owner's kernel on stream NEW.
//                                OLD: legacy | blocking | nonblocking | ptds (per-thread default)
//                                NEW: the same, or later (non-blocking, created after cudaMalloc)
// Prints "reuse_hazard MODE: reused=R corrupted_bytes=N alloc_ms=T" (alloc_ms: host time of the
// cudaFree + cudaMalloc, informational: ~200 when the host waited for the slow kernel).
// Exit: 0 clean, 3 corrupted, 1 error, 2 usage.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
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

__global__ void late_write(unsigned char* p, std::size_t n, long long delay_cycles,
                           unsigned char value) {
  if (threadIdx.x == 0) {
    const long long start = clock64();
    while (clock64() - start < delay_cycles) {
    }
  }
  __syncthreads();
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = value;
}

namespace {

long long delay_cycles() {
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  return static_cast<long long>(clock_khz) * 200; // ~200 ms
}

std::size_t count_not(const unsigned char* p, std::size_t n, unsigned char value) {
  return static_cast<std::size_t>(
      std::count_if(p, p + n, [&](unsigned char c) { return c != value; }));
}

int classic(bool async) {
  constexpr std::size_t n = 4u << 20;
  cudaStream_t slow, other;
  CHECK(cudaStreamCreateWithFlags(&slow, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  const long long delay = delay_cycles();
  unsigned char *a = nullptr, *b = nullptr;
  if (async) {
    CHECK(cudaMallocAsync(&a, n, slow));
  } else {
    CHECK(cudaMalloc(&a, n));
  }
  late_write<<<1, 256, 0, slow>>>(a, n, delay, 0xAA);
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
  const std::size_t bad = count_not(host.data(), n, 0);
  std::printf("reuse_hazard%s: reused=%d corrupted_bytes=%zu\n", async ? " async" : "", a == b,
              bad);
  return bad != 0 ? 3 : 0;
}

// nullptr stream handle = "not made"; kind "later" is made by the caller after cudaMalloc.
bool make_stream(const std::string& kind, cudaStream_t* s) {
  if (kind == "legacy") {
    *s = cudaStreamLegacy;
  } else if (kind == "ptds") {
    *s = cudaStreamPerThread;
  } else if (kind == "blocking") {
    CHECK(cudaStreamCreateWithFlags(s, cudaStreamDefault));
  } else if (kind == "nonblocking" || kind == "later") {
    CHECK(cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  } else {
    return false;
  }
  return true;
}

int barrier(const std::string& old_kind, const std::string& new_kind) {
  constexpr std::size_t n = 32u << 20; // oversize: a segment of its own in gmem's pool
  cudaStream_t old_stream = nullptr, new_stream = nullptr;
  if (old_kind == "later" || !make_stream(old_kind, &old_stream) ||
      (new_kind != "later" && !make_stream(new_kind, &new_stream))) {
    std::printf("reuse_hazard: unknown stream kind in '%s %s'\n", old_kind.c_str(),
                new_kind.c_str());
    return 2;
  }
  const long long delay = delay_cycles();
  unsigned char *a = nullptr, *b = nullptr;
  CHECK(cudaMalloc(&a, n));
  CHECK(cudaMemset(a, 0, n));
  CHECK(cudaDeviceSynchronize());
  late_write<<<1, 256, 0, old_stream>>>(a, n, delay, 0xAA);
  CHECK(cudaGetLastError());
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(cudaFree(a));
  CHECK(cudaMalloc(&b, n));
  const auto t1 = std::chrono::steady_clock::now();
  if (new_kind == "later") make_stream(new_kind, &new_stream);
  late_write<<<256, 256, 0, new_stream>>>(b, n, 0, 0xBB);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> host(n);
  CHECK(cudaMemcpy(host.data(), b, n, cudaMemcpyDeviceToHost));
  const std::size_t bad = count_not(host.data(), n, 0xBB);
  std::printf("reuse_hazard barrier %s->%s: reused=%d corrupted_bytes=%zu alloc_ms=%.1f\n",
              old_kind.c_str(), new_kind.c_str(), a == b, bad,
              std::chrono::duration<double, std::milli>(t1 - t0).count());
  CHECK(cudaFree(b));
  return bad != 0 ? 3 : 0;
}

} // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "barrier") == 0) {
    if (argc != 4) {
      std::printf("usage: reuse_hazard barrier OLD NEW\n");
      return 2;
    }
    return barrier(argv[2], argv[3]);
  }
  return classic(argc > 1 && std::strcmp(argv[1], "async") == 0);
}
