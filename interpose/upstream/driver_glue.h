// The pool's two interfaces (upstream, fences) and its observer, over the real driver, for one
// context. Each makes its context current for the call when the calling thread has another
// one, and does nothing once the context is gone (dropped(): the driver already released the
// memory and the events).
#pragma once

#include <atomic>
#include <mutex>
#include <vector>

#include "interpose/real_driver.h"
#include "pool/pool.h"

namespace gmem::shim {

struct context_link {
  const real_driver* real = nullptr;
  CUcontext ctx = nullptr;
  int device = 0;
  std::atomic<bool> dropped{false};
};

// Makes `link.ctx` current for the scope when the thread has another context current.
class ctx_scope {
public:
  explicit ctx_scope(const context_link& link) : real_(*link.real) {
    CUcontext current = nullptr;
    if (real_.cuCtxGetCurrent(&current) == CUDA_SUCCESS && current != link.ctx) {
      pushed_ = real_.cuCtxPushCurrent_v2(link.ctx) == CUDA_SUCCESS;
    }
  }
  ~ctx_scope() {
    if (pushed_) {
      CUcontext popped = nullptr;
      (void)real_.cuCtxPopCurrent_v2(&popped);
    }
  }
  ctx_scope(const ctx_scope&) = delete;
  ctx_scope& operator=(const ctx_scope&) = delete;

private:
  const real_driver& real_;
  bool pushed_ = false;
};

// Device segments: cuMemAlloc_v2 / cuMemFree_v2.
class device_upstream final : public upstream {
public:
  explicit device_upstream(context_link& link) : link_(link) {}
  std::uintptr_t map(std::size_t bytes) noexcept override;
  void unmap(std::uintptr_t base, std::size_t bytes) noexcept override;
  // Host time in the driver's calls, for the GMEM_VERBOSE report (cuMemFree includes its wait
  // for the device).
  std::uint64_t map_ns() const { return map_ns_.load(std::memory_order_relaxed); }
  std::uint64_t unmap_ns() const { return unmap_ns_.load(std::memory_order_relaxed); }

private:
  context_link& link_;
  std::atomic<std::uint64_t> map_ns_{0}, unmap_ns_{0};
};

// Pinned host segments with one flag set: cuMemHostAlloc / cuMemFreeHost.
class host_upstream final : public upstream {
public:
  host_upstream(context_link& link, unsigned flags) : link_(link), flags_(flags) {}
  std::uintptr_t map(std::size_t bytes) noexcept override;
  void unmap(std::uintptr_t base, std::size_t bytes) noexcept override;

private:
  context_link& link_;
  unsigned flags_;
};

// cuCtxSynchronize and events (kept in a small cache: cuEventCreate costs more than a record);
// barrier() is the stream registry's device-side barrier (interpose/upstream/stream_registry.h).
class driver_fences final : public fences {
public:
  explicit driver_fences(context_link& link) : link_(link) {}
  bool synchronize() noexcept override;
  bool barrier() noexcept override;
  event_handle mark() noexcept override;
  event_handle record(stream_handle s) noexcept override;
  bool query(event_handle e) noexcept override;
  bool wait(stream_handle s, event_handle e) noexcept override;
  void release(event_handle e) noexcept override;
  // Driver calls made for the pool's events (GMEM_VERBOSE): records, queries, stream waits.
  struct counters {
    unsigned long long records = 0, queries = 0, waits = 0;
  };
  counters stats() const {
    return {records_.load(std::memory_order_relaxed), queries_.load(std::memory_order_relaxed),
            waits_.load(std::memory_order_relaxed)};
  }

private:
  CUevent take_event() noexcept;      // a spare one, or a new one (nullptr: failed); ctx current
  void give_back(CUevent e) noexcept; // to the spares, or destroyed
  std::atomic<unsigned long long> records_{0}, queries_{0}, waits_{0};
  context_link& link_;
  std::mutex mu_;              // guards spare_
  std::vector<CUevent> spare_; // created in link_.ctx, not recorded on anything pending
};

// Forwards the pool's segment, fence, trim and OOM events to the trace.
class trace_observer final : public pool_observer {
public:
  explicit trace_observer(int device) : device_(device) {}
  void attach(const pool* p) { pool_ = p; }
  void on_segment_map(std::uintptr_t base, std::size_t bytes) noexcept override;
  void on_segment_unmap(std::uintptr_t base, std::size_t bytes) noexcept override;
  void on_stitch(std::uintptr_t base, std::size_t bytes) noexcept override;
  void on_unstitch(std::uintptr_t base, std::size_t bytes) noexcept override;
  void on_fence(std::uint64_t duration_ns, std::size_t released_bytes) noexcept override;
  void on_trim(std::size_t released_bytes) noexcept override;
  void on_oom(std::size_t requested_bytes) noexcept override;
  std::uint64_t fence_ns() const { return fence_ns_.load(std::memory_order_relaxed); }

private:
  int device_;
  const pool* pool_ = nullptr;
  std::atomic<std::uint64_t> fence_ns_{0}; // host time in pool fences (GMEM_VERBOSE)
};

// The stream value the pool sees for a CUstream passed to a legacy (`per_thread` false) or a
// _ptsz function. The legacy default stream is 0. The per-thread default stream is a
// different stream on every thread under one handle, so it maps to k_no_stream: its frees wait
// for a fence and its allocations get blocks safe for every stream.
inline stream_handle pool_stream(CUstream s, bool per_thread) {
  const auto v = reinterpret_cast<std::uintptr_t>(s);
  if (v == reinterpret_cast<std::uintptr_t>(CU_STREAM_LEGACY)) return 0;
  if (v == reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD) || (per_thread && v == 0)) {
    return k_no_stream;
  }
  return v;
}

} // namespace gmem::shim
