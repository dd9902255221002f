// Fake-only entry points of tests/fake_cuda/libcuda.so.1, the driver stand-in that lets the
// shim run end to end on machines without a GPU. "Device" memory is host memory; every stream
// is a thread that runs its work in order, so a "kernel" can still be writing after the host
// moved on, exactly the hazard docs/design.md's reuse-safety section is about. Streams keep the
// driver's implicit synchronization: the legacy stream (also standing in for the per-thread
// default stream) waits for earlier work of the context's blocking streams and they wait for it;
// CU_STREAM_NON_BLOCKING streams are independent. A destroyed stream's handle is refused.
//
// Environment: FAKE_CUDA_TOTAL_BYTES (device size, default 1G), FAKE_CUDA_DEVICES (default 1),
// FAKE_CUDA_DRIVER_VERSION (what cuDriverGetVersion reports, default CUDA_VERSION; cuGetProcAddress
// hands out nothing newer: 12040 hides the context barrier), FAKE_CUDA_CONTEXT_BARRIER=noop
// (cuCtxRecordEvent / cuCtxWaitEvent succeed and do nothing), FAKE_CUDA_CAPTURE_QUERY_US
// (each cuStreamIsCapturing sleeps that long: a fence that checks streams for captures takes
// time, so threads meet in it),
// FAKE_CUDA_FD_EXPORT (fake_vmm.cpp), FAKE_CUDA_REPORT=1 (print the counters to stderr at exit, one
// "fake_cuda: name=value" line).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda.h>

// X(name): upstream calls the fake saw. smallest/largest cover cuMemAlloc_v2, cuMemAllocAsync
// and the host allocations together.
#define FAKE_CUDA_COUNTERS(X)                                                                      \
  X(mem_alloc_calls)                                                                               \
  X(mem_free_calls)                                                                                \
  X(async_alloc_calls)                                                                             \
  X(async_free_calls)                                                                              \
  X(host_alloc_calls)                                                                              \
  X(host_free_calls)                                                                               \
  X(failed_frees)                                                                                  \
  X(ctx_syncs)                                                                                     \
  X(stream_syncs)                                                                                  \
  X(event_records)                                                                                 \
  X(capture_queries)                                                                               \
  X(event_queries)                                                                                 \
  X(stream_queries)                                                                                \
  X(stream_waits)                                                                                  \
  X(ctx_records)                                                                                   \
  X(ctx_waits)                                                                                     \
  X(live_allocs)                                                                                   \
  X(vmm_creates)                                                                                   \
  X(vmm_maps)                                                                                      \
  X(vmm_unmaps)                                                                                    \
  X(vmm_releases)                                                                                  \
  X(vmm_exports)                                                                                   \
  X(vmm_imports)                                                                                   \
  X(smallest_alloc)                                                                                \
  X(largest_alloc)

struct fake_cuda_counters {
#define FAKE_CUDA_FIELD(n) std::uint64_t n;
  FAKE_CUDA_COUNTERS(FAKE_CUDA_FIELD)
#undef FAKE_CUDA_FIELD
};

extern "C" {
// A "kernel" on `stream`: sleeps `sleep_us`, then sets `bytes` bytes at `dst` to `value`.
CUresult fakeLaunchKernel(CUstream stream, unsigned sleep_us, CUdeviceptr dst, unsigned char value,
                          std::size_t bytes);
// How many cuEventRecord calls `stream` has seen.
CUresult fakeStreamEventRecords(CUstream stream, std::uint64_t* count);
// Makes cuStreamIsCapturing report CU_STREAM_CAPTURE_STATUS_ACTIVE for `stream` (or not).
CUresult fakeSetCapturing(CUstream stream, int capturing);
void fakeGetCounters(fake_cuda_counters* out);
void fakeResetCounters();
}
