// Calling the real driver from anywhere in the shim, and the pool's status as a CUresult.
#pragma once

#include "interpose/real_driver.h"
#include "interpose/shim_state.h"
#include "pool/pool.h"

namespace gmem::shim {

// Calls the driver's own `member` function; CUDA_ERROR_NOT_INITIALIZED when libcuda.so.1 or
// that function is missing.
template <auto member, typename... A> inline CUresult call_real(A... args) {
  const real_driver* r = driver();
  if (GMEM_UNLIKELY(r == nullptr || r->*member == nullptr)) return CUDA_ERROR_NOT_INITIALIZED;
  return (r->*member)(args...);
}
#define GMEM_REAL(name, ...) ::gmem::shim::call_real<&::gmem::shim::real_driver::name>(__VA_ARGS__)

inline CUresult to_cuda(pool_status s) {
  switch (s) {
  case pool_status::ok:
    return CUDA_SUCCESS;
  case pool_status::out_of_memory:
    return CUDA_ERROR_OUT_OF_MEMORY;
  case pool_status::invalid:
  case pool_status::not_owned:
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_ERROR_UNKNOWN;
}

// Device ordinal of the current context for trace records of pass-through calls; -1 if none.
inline int current_device() {
  const real_driver* r = driver();
  CUdevice d = -1;
  if (r == nullptr || r->cuCtxGetDevice == nullptr || r->cuCtxGetDevice(&d) != CUDA_SUCCESS)
    return -1;
  return d;
}

} // namespace gmem::shim
