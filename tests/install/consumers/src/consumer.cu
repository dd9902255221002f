// A CUDA program (nvcc) using gmem's client API from host code. The kernel is compiled, not
// launched, so the program runs on the fake driver too.
#include <gmem/gmem.h>

#include <cstdio>

__global__ void scale(float* x, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

int main() {
  uint64_t bytes = 0;
  const gmem_status s = gmem_allocatable_bytes(0, &bytes);
  std::printf("consumer: lang=cuda available=%d allocatable=%s:%llu\n", gmem_available(),
              gmem_status_name(s), static_cast<unsigned long long>(bytes));
  return s == GMEM_OK ? 0 : 1;
}
