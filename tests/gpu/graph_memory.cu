// Graph memory: a graph with explicit memory nodes (cudaGraphAddMemAllocNode, a kernel
// node writing the allocation, a memcpy to host, cudaGraphAddMemFreeNode) launched 3 times, and
// one allocation node without a free node (freed after the launch with cudaFree); plus a stream
// capture of cudaMallocAsync/cudaFreeAsync. Self-checks the values; exit 0 ok.
#include <cstdio>
#include <cuda_runtime.h>

#define CK(x)                                                                                      \
  do {                                                                                             \
    cudaError_t e_ = (x);                                                                          \
    if (e_ != cudaSuccess) {                                                                       \
      std::printf("FAIL: %s: %s\n", #x, cudaGetErrorString(e_));                                   \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

__global__ void fill(int* p, int n, int v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v + i;
}

int main() {
  const int n = 1 << 20;
  int* host = nullptr;
  CK(cudaMallocHost(&host, n * sizeof(int)));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaMemAllocNodeParams ap{};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = n * sizeof(int);
  cudaGraphNode_t alloc, kern, copy, freen, keep;
  CK(cudaGraphAddMemAllocNode(&alloc, g, nullptr, 0, &ap));
  int* d = static_cast<int*>(ap.dptr);
  cudaKernelNodeParams kp{};
  int nn = n, v = 7;
  void* args[] = {&d, &nn, &v};
  kp.func = reinterpret_cast<void*>(fill);
  kp.gridDim = dim3((n + 255) / 256);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  CK(cudaGraphAddKernelNode(&kern, g, &alloc, 1, &kp));
  CK(cudaGraphAddMemcpyNode1D(&copy, g, &kern, 1, host, d, n * sizeof(int),
                              cudaMemcpyDeviceToHost));
  CK(cudaGraphAddMemFreeNode(&freen, g, &copy, 1, d));
  ap.bytesize = 4 << 20;
  CK(cudaGraphAddMemAllocNode(&keep, g, nullptr, 0, &ap)); // freed after the launch
  void* kept = ap.dptr;
  cudaGraphExec_t exec;
  CK(cudaGraphInstantiate(&exec, g, 0));
  CK(cudaGraphLaunch(exec, 0));
  CK(cudaStreamSynchronize(0));
  for (int i = 0; i < n; i += 4099)
    if (host[i] != 7 + i) {
      std::printf("FAIL: graph memory: host[%d]=%d\n", i, host[i]);
      return 1;
    }
  CK(cudaFree(kept));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t cg;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  int* c = nullptr;
  CK(cudaMallocAsync(&c, n * sizeof(int), s));
  fill<<<(n + 255) / 256, 256, 0, s>>>(c, n, 3);
  CK(cudaMemcpyAsync(host, c, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CK(cudaFreeAsync(c, s));
  CK(cudaStreamEndCapture(s, &cg));
  cudaGraphExec_t cexec;
  CK(cudaGraphInstantiate(&cexec, cg, 0));
  CK(cudaGraphLaunch(cexec, s));
  CK(cudaStreamSynchronize(s));
  if (host[12345] != 3 + 12345) {
    std::printf("FAIL: captured graph: host[12345]=%d\n", host[12345]);
    return 1;
  }
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphExecDestroy(cexec));
  CK(cudaGraphDestroy(g));
  CK(cudaGraphDestroy(cg));
  CK(cudaStreamDestroy(s));
  CK(cudaFreeHost(host));
  std::printf("graph_memory: OK\n");
  return 0;
}
