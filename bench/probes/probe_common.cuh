// What the probes share (each is one nvcc translation unit, not a benchmark of gmem): a kernel
// that keeps the GPU busy for a number of clock cycles, and a driver-call check that exits
// with the call and the driver's message.
#pragma once

#include <cuda.h>
#include <errno.h> // program_invocation_short_name (glibc)

#include <cstdio>
#include <cstdlib>

namespace probe {

__global__ void spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
}

inline void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    const char* s = nullptr;
    cuGetErrorString(r, &s);
    std::fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, what,
                 s != nullptr ? s : "?");
    std::exit(1);
  }
}

} // namespace probe
