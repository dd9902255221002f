// A CUDA graph captured on one thread while another thread frees and allocates through
// cudaMalloc/cudaFree (the pool reuses blocks, so it fences): under gmem the fence must not
// be a context barrier while the capture is open (the driver would invalidate the capture),
// the capture ends normally, and the graph, replayed afterwards, gives the right result; the
// allocating thread never sees another owner's bytes. After the capture ended, the same
// allocation loop runs again (then the fences can be context barriers).
// Exit 0 ok, 2 capture or graph failed, 3 corrupted, 1 other CUDA error.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>

namespace {

#define CHECK(x)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::printf("capture_fence: %s: %s\n", #x, cudaGetErrorString(e_));                          \
      std::fflush(stdout);                                                                         \
      std::_Exit(1);                                                                               \
    }                                                                                              \
  } while (0)

__global__ void add_one(int* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

// Spins ~`cycles`, then writes v: the old owner still writing after the host freed the block.
__global__ void slow_fill(int* x, int n, int v, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = v;
}

__global__ void fill(int* x, int n, int v) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = v;
}

__global__ void count_not(const int* x, int n, int v, unsigned* bad) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    if (x[i] != v) atomicAdd(bad, 1u);
}

constexpr int k_graph_n = 1 << 20;
constexpr int k_adds = 10, k_replays = 5;
constexpr int k_buf_n = (8 << 20) / sizeof(int); // 8 MiB blocks

// Frees and allocates `rounds` times; returns the number of wrong words the new owners saw.
unsigned churn(int rounds, long long cycles, cudaStream_t old_owner, cudaStream_t new_owner,
               unsigned* bad) {
  CHECK(cudaMemsetAsync(bad, 0, sizeof(unsigned), new_owner));
  for (int r = 0; r < rounds; ++r) {
    int* p = nullptr;
    CHECK(cudaMalloc(&p, k_buf_n * sizeof(int)));
    slow_fill<<<64, 256, 0, old_owner>>>(p, k_buf_n, 1000 + r, cycles);
    CHECK(cudaFree(p));
    int* q = nullptr;
    CHECK(cudaMalloc(&q, k_buf_n * sizeof(int)));
    fill<<<64, 256, 0, new_owner>>>(q, k_buf_n, -r);
    count_not<<<64, 256, 0, new_owner>>>(q, k_buf_n, -r, bad);
    CHECK(cudaStreamSynchronize(new_owner));
    CHECK(cudaFree(q));
  }
  unsigned h = 0;
  CHECK(cudaMemcpyAsync(&h, bad, sizeof h, cudaMemcpyDeviceToHost, new_owner));
  CHECK(cudaStreamSynchronize(new_owner));
  return h;
}

} // namespace

// "sync-probe": what a context synchronization on this thread does to a thread-local capture
// open on another thread (the fact behind the shim's rule: no fence while a capture is open).
int sync_probe() {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* x = nullptr;
  CHECK(cudaMalloc(&x, sizeof(int)));
  std::atomic<int> phase{0};
  cudaError_t end = cudaSuccess;
  std::thread t([&] {
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    add_one<<<1, 1, 0, s>>>(x, 1);
    phase = 1;
    while (phase.load() != 2)
      std::this_thread::yield();
    cudaGraph_t g = nullptr;
    end = cudaStreamEndCapture(s, &g);
  });
  while (phase.load() != 1)
    std::this_thread::yield();
  const cudaError_t sync = cudaDeviceSynchronize();
  phase = 2;
  t.join();
  std::printf("capture_fence sync-probe: cudaDeviceSynchronize=%s, then cudaStreamEndCapture=%s\n",
              cudaGetErrorName(sync), cudaGetErrorName(end));
  return 0;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  if (argc > 1 && std::string(argv[1]) == "sync-probe") return sync_probe();
  int clock_khz = 0;
  CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const long long cycles = static_cast<long long>(clock_khz) * 1000 / 5000; // ~200 us
  int* g = nullptr;
  CHECK(cudaMalloc(&g, k_graph_n * sizeof(int)));
  CHECK(cudaMemset(g, 0, k_graph_n * sizeof(int)));
  unsigned* bad = nullptr;
  CHECK(cudaMalloc(&bad, sizeof(unsigned)));
  cudaStream_t capture_stream, old_owner, new_owner;
  CHECK(cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&old_owner, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&new_owner, cudaStreamNonBlocking));
  CHECK(cudaDeviceSynchronize());

  std::atomic<int> phase{0}; // 1: capture open; 2: churn done
  cudaError_t end_error = cudaSuccess;
  cudaGraph_t graph = nullptr;
  std::thread capturer([&] {
    // Thread-local mode: the other thread may still call cudaMalloc / cudaFree.
    CHECK(cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < k_adds; ++i)
      add_one<<<(k_graph_n + 255) / 256, 256, 0, capture_stream>>>(g, k_graph_n);
    phase = 1;
    while (phase.load() != 2)
      std::this_thread::yield();
    end_error = cudaStreamEndCapture(capture_stream, &graph);
  });
  while (phase.load() != 1)
    std::this_thread::yield();
  const unsigned during = churn(50, cycles, old_owner, new_owner, bad);
  phase = 2;
  capturer.join();
  if (end_error != cudaSuccess || graph == nullptr) {
    std::printf("capture_fence: the capture failed: %s\n", cudaGetErrorString(end_error));
    return 2;
  }
  cudaGraphExec_t exec = nullptr;
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int i = 0; i < k_replays; ++i)
    CHECK(cudaGraphLaunch(exec, capture_stream));
  CHECK(cudaStreamSynchronize(capture_stream));
  CHECK(cudaMemsetAsync(bad, 0, sizeof(unsigned), capture_stream));
  count_not<<<64, 256, 0, capture_stream>>>(g, k_graph_n, k_adds * k_replays, bad);
  unsigned graph_bad = 0;
  CHECK(cudaMemcpyAsync(&graph_bad, bad, sizeof graph_bad, cudaMemcpyDeviceToHost, capture_stream));
  CHECK(cudaStreamSynchronize(capture_stream));
  const unsigned after = churn(50, cycles, old_owner, new_owner, bad);
  std::printf("capture_fence graph_wrong=%u corrupted_during=%u corrupted_after=%u\n", graph_bad,
              during, after);
  if (graph_bad != 0) return 2;
  return during != 0 || after != 0 ? 3 : 0;
}
