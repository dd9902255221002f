// The real driver, resolved once: the shim dlopen()s libcuda.so.1 itself and keeps, in an
// immutable table, the driver's own functions (never the shim's symbols: the pool's upstream
// and fences must not come back into the hooks) and the map "address the driver hands out ->
// the shim's function" used by the dlsym and cuGetProcAddress wrappers.
#pragma once

#include <atomic>
#include <cstdint>

#include "interpose/cuda_api.h"

namespace gmem::shim {

struct real_driver {
#define GMEM_REAL_MEMBER(name, ...) decltype(&::name) name = nullptr;
  GMEM_HOOKS(GMEM_REAL_MEMBER)
  GMEM_REAL_ONLY(GMEM_REAL_MEMBER)
#undef GMEM_REAL_MEMBER
  // The context barrier's two calls (CUDA 12.5): asked of the driver's own cuGetProcAddress at
  // version 12050, so an older driver leaves them nullptr and fences fan out over the streams
  // (interpose/upstream/stream_registry.h).
  decltype(&::cuCtxRecordEvent) cuCtxRecordEvent = nullptr;
  decltype(&::cuCtxWaitEvent) cuCtxWaitEvent = nullptr;
  void* handle = nullptr; // of libcuda.so.1
};

// The table once resolved (never changes after); read inline by every hook.
extern std::atomic<const real_driver*> g_driver;
const real_driver* driver_load(); // driver()'s first call

// The table, resolving it on first use (thread-safe). nullptr when libcuda.so.1 cannot be
// loaded; the reason was printed once.
inline const real_driver* driver() {
  if (const real_driver* d = g_driver.load(std::memory_order_acquire)) return d;
  return driver_load();
}
// The table if it was resolved already; never loads anything.
const real_driver* driver_if_resolved();
// Like driver(), but never loads libcuda: nullptr until someone else has loaded it.
const real_driver* driver_if_loaded();

// The shim's function for an address the driver handed out, or `address` itself.
void* substitute(void* address);
// How many substitutions each route made (GMEM_VERBOSE).
struct substitution_counts {
  std::uint64_t by_dlsym;
  std::uint64_t by_proc_address;
};
void count_substitution(bool by_dlsym);
substitution_counts substitutions();

// Is `ctx` (current, on `device`) the device's primary context? An inactive primary context is
// not created to find out.
bool is_primary_context(const real_driver& real, CUcontext ctx, int device);

// glibc's dlsym, found with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34") (or GLIBC_2.2.5).
using dlsym_fn = void* (*)(void*, const char*);
dlsym_fn real_dlsym();

} // namespace gmem::shim
