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

// The context barrier's two calls (CUDA 12.5 drivers), asked of cuGetProcAddress at 12050 as
// the shim does; both nullptr when the driver has none.
using ctx_event_fn = CUresult (*)(CUcontext, CUevent);
struct context_event_calls {
  ctx_event_fn record = nullptr, wait = nullptr;
  context_event_calls() {
    CUdriverProcAddressQueryResult q{};
    (void)cuGetProcAddress("cuCtxRecordEvent", reinterpret_cast<void**>(&record), 12050,
                           CU_GET_PROC_ADDRESS_DEFAULT, &q);
    (void)cuGetProcAddress("cuCtxWaitEvent", reinterpret_cast<void**>(&wait), 12050,
                           CU_GET_PROC_ADDRESS_DEFAULT, &q);
    if (record == nullptr || wait == nullptr) record = wait = nullptr;
  }
};

} // namespace probe
