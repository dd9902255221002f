// GMEM_STRICT=1: the driver's synchronization semantics for pooled allocations and frees.
//
// The driver's cuMemFree / cuMemFreeHost (cudaFree, cudaFreeHost) wait until the device has
// finished the work issued before them, and its allocations (cuMemAlloc, cuMemHostAlloc) are
// among the operations that order work across streams: two commands of different streams
// cannot overlap when an allocation was issued between them (CUDA Programming Guide,
// "Implicit Synchronization"). A pooled free returns at once and a pooled allocation makes no
// driver call, so a program that used either as a barrier (a kernel writes mapped pinned
// memory, the program frees an unrelated buffer, then reads the host memory) sees stale data.
//
// Strict mode restores both while the pool still serves the memory:
// - after a stream-less free of a pooled block: a synchronization of the block's context
//   (cuCtxSynchronize, made current for the call), which the pools also take as a fence, so
//   the freed block (and every pending one) is reusable at once;
// - before a stream-less allocation: a device-side barrier over every stream of the context
//   (the pools' own, GMEM_BARRIERS), so work issued after the allocation on any stream runs
//   after work issued before it on any other; cuCtxSynchronize where no barrier can be made.
// Stream-ordered calls (cuMemAllocAsync / cuMemFreeAsync) keep their stream semantics: the
// driver does not synchronize them either.
#pragma once

#include <atomic>

#include "interpose/context_pools.h"

namespace gmem::shim {

// GMEM_STRICT; set once by the shim's init, before any hook uses the pool. Read on every
// allocation and free: one relaxed load, no call.
extern std::atomic<bool> g_strict;
inline bool strict_mode() {
  return g_strict.load(std::memory_order_relaxed);
}

// cuCtxSynchronize on `e`'s context, with the pools of `e` told it is a fence (the body of the
// cuCtxSynchronize hook; also used by strict frees).
CUresult synchronize_context(context_entry& e);
// After a successful stream-less free of the block at `p` (device) or of a pinned host block
// owned by `host_owner_entry`: waits for the device like the driver's free.
void strict_after_device_free(std::uintptr_t p);
void strict_after_host_free(std::uintptr_t p);
// Before a stream-less allocation from `e`'s pools: orders the context's streams.
void strict_before_alloc(context_entry& e);

} // namespace gmem::shim
