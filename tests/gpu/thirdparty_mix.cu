// Third-party-style CUDA programs in one binary, each with its own self-check, in the shapes
// the issue-16 survey used (patterns of the CUDA samples and of common libraries' glue code):
//   pitched    cudaMallocPitch + cudaMemcpy2D round trip
//   mapped     cudaHostAlloc(Mapped) written by a kernel, read after cudaStreamSynchronize
//   callbacks  cudaLaunchHostFunc ordering on a stream, with cudaMallocAsync buffers
//   threads    4 host threads, each with its own stream and cudaMalloc/cudaFree churn
//   managed    cudaMallocManaged touched by host and device
//   events     cudaEventRecord/cudaStreamWaitEvent across two non-blocking streams
// `thirdparty_mix NAME` runs one; `thirdparty_mix all` runs every one. Prints "NAME: OK" or
// "FAIL: ..."; exit 0 when all passed.
#include <atomic>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>
#include <thread>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::printf("FAIL: %s: %s\n", #x, cudaGetErrorString(e_));                                   \
      return false;                                                                                \
    }                                                                                              \
  } while (0)

__global__ void iota(int* p, int n, int base) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = base + i;
}
__global__ void add(int* p, int n, int v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += v;
}

namespace {

bool pitched() {
  const int w = 1000, h = 300;
  std::vector<float> src(static_cast<std::size_t>(w) * h), dst(src.size());
  for (std::size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<float>(i) * 0.5f;
  float* d = nullptr;
  std::size_t pitch = 0;
  CK(cudaMallocPitch(reinterpret_cast<void**>(&d), &pitch, w * sizeof(float), h));
  CK(cudaMemcpy2D(d, pitch, src.data(), w * sizeof(float), w * sizeof(float), h,
                  cudaMemcpyHostToDevice));
  CK(cudaMemcpy2D(dst.data(), w * sizeof(float), d, pitch, w * sizeof(float), h,
                  cudaMemcpyDeviceToHost));
  CK(cudaFree(d));
  return std::memcmp(src.data(), dst.data(), src.size() * sizeof(float)) == 0 &&
         pitch >= w * sizeof(float);
}

bool mapped() {
  const int n = 1 << 16;
  int* h = nullptr;
  CK(cudaHostAlloc(&h, n * sizeof(int), cudaHostAllocMapped));
  int* d = nullptr;
  CK(cudaHostGetDevicePointer(&d, h, 0));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  iota<<<(n + 255) / 256, 256, 0, s>>>(d, n, 42);
  CK(cudaStreamSynchronize(s));
  bool ok = true;
  for (int i = 0; i < n; ++i)
    ok = ok && h[i] == 42 + i;
  CK(cudaStreamDestroy(s));
  CK(cudaFreeHost(h));
  return ok;
}

void CUDART_CB note(void* data) {
  static_cast<std::atomic<int>*>(data)->fetch_add(1);
}

bool callbacks() {
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  std::atomic<int> calls{0};
  const int n = 4096;
  std::vector<int> out(n);
  for (int round = 0; round < 20; ++round) {
    int* d = nullptr;
    CK(cudaMallocAsync(&d, n * sizeof(int), s));
    iota<<<n / 256, 256, 0, s>>>(d, n, round);
    CK(cudaLaunchHostFunc(s, note, &calls));
    CK(cudaMemcpyAsync(out.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CK(cudaFreeAsync(d, s));
    CK(cudaStreamSynchronize(s));
    if (out[n - 1] != round + n - 1) return false;
  }
  CK(cudaStreamDestroy(s));
  return calls.load() == 20;
}

bool threads() {
  std::atomic<int> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([t, &bad] {
      cudaStream_t s;
      if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        ++bad;
        return;
      }
      const int n = 10000 + t * 1000;
      std::vector<int> out(n);
      for (int i = 0; i < 200; ++i) {
        int* d = nullptr;
        if (cudaMalloc(&d, n * sizeof(int)) != cudaSuccess) {
          ++bad;
          break;
        }
        iota<<<(n + 255) / 256, 256, 0, s>>>(d, n, i * 7 + t);
        cudaMemcpyAsync(out.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s);
        cudaStreamSynchronize(s);
        if (out[n / 2] != i * 7 + t + n / 2) ++bad;
        cudaFree(d);
      }
      cudaStreamDestroy(s);
    });
  for (auto& t : ts)
    t.join();
  return bad.load() == 0;
}

bool managed() {
  const int n = 1 << 18;
  int* m = nullptr;
  CK(cudaMallocManaged(&m, n * sizeof(int)));
  for (int i = 0; i < n; ++i)
    m[i] = i;
  add<<<(n + 255) / 256, 256>>>(m, n, 5);
  CK(cudaDeviceSynchronize());
  bool ok = true;
  for (int i = 0; i < n; i += 97)
    ok = ok && m[i] == i + 5;
  CK(cudaFree(m));
  return ok;
}

bool events() {
  const int n = 1 << 20;
  int* d = nullptr;
  CK(cudaMalloc(&d, n * sizeof(int)));
  cudaStream_t a, b;
  CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
  cudaEvent_t e;
  CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  iota<<<n / 256, 256, 0, a>>>(d, n, 0);
  CK(cudaEventRecord(e, a));
  CK(cudaStreamWaitEvent(b, e, 0));
  add<<<n / 256, 256, 0, b>>>(d, n, 1);
  std::vector<int> out(n);
  CK(cudaMemcpyAsync(out.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, b));
  CK(cudaStreamSynchronize(b));
  CK(cudaEventDestroy(e));
  CK(cudaStreamDestroy(a));
  CK(cudaStreamDestroy(b));
  CK(cudaFree(d));
  return out[0] == 1 && out[n - 1] == n;
}

struct test {
  const char* name;
  bool (*fn)();
};
const test k_tests[] = {{"pitched", pitched}, {"mapped", mapped},   {"callbacks", callbacks},
                        {"threads", threads}, {"managed", managed}, {"events", events}};

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: thirdparty_mix NAME|all\n");
    return 2;
  }
  int failed = 0, ran = 0;
  for (const test& t : k_tests) {
    if (std::strcmp(argv[1], "all") != 0 && std::strcmp(argv[1], t.name) != 0) continue;
    ++ran;
    const bool ok = t.fn();
    std::printf("%s: %s\n", t.name, ok ? "OK" : "FAIL");
    failed += ok ? 0 : 1;
  }
  if (ran == 0) std::fprintf(stderr, "thirdparty_mix: unknown test %s\n", argv[1]);
  return ran != 0 && failed == 0 ? 0 : 1;
}
