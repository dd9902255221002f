// What every hook file shares: calling the real driver, the pool-to-CUresult translation and
// the device of the current context for trace records.
#pragma once

#include <atomic>

#include "interpose/context_pools.h"
#include "interpose/real_call.h"
#include "interpose/real_driver.h"
#include "interpose/shim_state.h"
#include "interpose/trace_hooks.h"

#define GMEM_HOOK extern "C" __attribute__((visibility("default")))

namespace gmem::shim {

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
