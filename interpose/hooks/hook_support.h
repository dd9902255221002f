// What every hook file shares: calling the real driver, the pool-to-CUresult translation and
// the device of the current context for trace records.
#pragma once

#include <atomic>

#include "interpose/context_pools.h"
#include "interpose/real_driver.h"
#include "interpose/shim_state.h"
#include "interpose/trace_hooks.h"

#define GMEM_HOOK extern "C" __attribute__((visibility("default")))

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

// Allocations that reached the driver unpooled, by trace kind (GMEM_VERBOSE report).
extern std::atomic<std::uint64_t> g_passthrough_counts[trace::k_alloc_kind_count];
inline void count_passthrough(trace::alloc_kind kind) {
  g_passthrough_counts[static_cast<std::size_t>(kind)].fetch_add(1, std::memory_order_relaxed);
}

// A pass-through allocation the profiler still sees: `call` performs it and returns the
// address through `*out`.
template <typename Call>
inline CUresult traced_passthrough(trace::alloc_kind kind, std::size_t bytes, std::uintptr_t stream,
                                   CUdeviceptr* out, Call&& call) {
  const std::uint32_t stack = trace::capture_stack();
  const CUresult r = call();
  if (r == CUDA_SUCCESS && out != nullptr) {
    count_passthrough(kind);
    trace::alloc(*out, bytes, bytes, current_device(), stream, kind, stack);
  }
  return r;
}

} // namespace gmem::shim
