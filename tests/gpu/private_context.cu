// A driver-API program with its own context (link: -lcuda): cuCtxCreate, 32 allocations with a
// kernel-free check (memset + copy back), 16 frees, cuCtxDestroy, exit. Exit 0 ok.
#include <cstdio>
#include <cuda.h>
#include <vector>

#define CK(x)                                                                                      \
  do {                                                                                             \
    CUresult r_ = (x);                                                                             \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      std::printf("FAIL: %s: %d\n", #x, r_);                                                       \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

int main() {
  CK(cuInit(0));
  CUdevice dev = 0;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx = nullptr;
  CUctxCreateParams params{};
  CK(cuCtxCreate(&ctx, &params, 0, dev));
  std::vector<CUdeviceptr> p(32);
  for (std::size_t i = 0; i < p.size(); ++i) {
    const std::size_t n = (i + 1) * 4096;
    CK(cuMemAlloc(&p[i], n));
    CK(cuMemsetD8(p[i], static_cast<unsigned char>(i), n));
    unsigned char last = 0;
    CK(cuMemcpyDtoH(&last, p[i] + n - 1, 1));
    if (last != static_cast<unsigned char>(i)) {
      std::printf("FAIL: block %zu reads %u\n", i, last);
      return 1;
    }
  }
  for (std::size_t i = 0; i < p.size(); i += 2)
    CK(cuMemFree(p[i]));
  CK(cuCtxDestroy(ctx));
  std::printf("private_context: OK\n");
  return 0;
}
