#include "interpose/upstream/driver_glue.h"
#include "interpose/oom_notice.h"

#include "interpose/capture_tracker.h"
#include "interpose/trace_hooks.h"
#include "interpose/upstream/stream_registry.h"

namespace gmem::shim {
namespace {

CUstream to_stream(stream_handle s) {
  return reinterpret_cast<CUstream>(s);
}

} // namespace

// A context synchronization while a graph capture is open in the context fails and
// invalidates the capture (seen on an H100, driver 580, with a thread-local capture open on
// another thread): then no fence; the pool's pending blocks wait and it grows instead.
bool driver_fences::synchronize() noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return false;
  ctx_scope scope(link_);
  if (streams().capture_may_be_open(*link_.real, link_.ctx)) return false;
  return link_.real->cuCtxSynchronize() == CUDA_SUCCESS;
}

bool driver_fences::barrier() noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return false;
  ctx_scope scope(link_); // the barrier checks that link_.ctx is current
  return streams().barrier(*link_.real, link_.ctx);
}

// The pool records when it seals a stream (pool_impl::seal_streams), some time after the
// frees: the stream may have begun capturing a graph since, and an event recorded there would
// become a node of the program's graph. Then no event: the blocks wait for a fence.
event_handle driver_fences::record(stream_handle s) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return 0;
  if (!captures().none() && stream_capturing(*link_.real, to_stream(s), false)) return 0;
  ctx_scope scope(link_);
  CUevent e = take_event();
  if (e == nullptr) return 0;
  records_.fetch_add(1, std::memory_order_relaxed);
  if (link_.real->cuEventRecord(e, to_stream(s)) != CUDA_SUCCESS) {
    (void)link_.real->cuEventDestroy_v2(e);
    return 0;
  }
  return reinterpret_cast<event_handle>(e);
}

// The registry checks for captures under the lock capture begins take, as for barriers.
event_handle driver_fences::mark() noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return 0;
  ctx_scope scope(link_); // the mark checks that link_.ctx is current
  CUevent e = take_event();
  if (e == nullptr) return 0;
  records_.fetch_add(1, std::memory_order_relaxed);
  if (!streams().mark(*link_.real, link_.ctx, e)) {
    give_back(e); // never recorded
    return 0;
  }
  return reinterpret_cast<event_handle>(e);
}

CUevent driver_fences::take_event() noexcept {
  {
    std::lock_guard lock(mu_);
    if (!spare_.empty()) {
      CUevent e = spare_.back();
      spare_.pop_back();
      return e;
    }
  }
  CUevent e = nullptr;
  return link_.real->cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS ? e : nullptr;
}

void driver_fences::give_back(CUevent e) noexcept {
  std::lock_guard lock(mu_);
  if (spare_.size() < 64) {
    spare_.push_back(e);
    return;
  }
  (void)link_.real->cuEventDestroy_v2(e);
}

bool driver_fences::query(event_handle e) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return false;
  queries_.fetch_add(1, std::memory_order_relaxed);
  return link_.real->cuEventQuery(reinterpret_cast<CUevent>(e)) == CUDA_SUCCESS;
}

bool driver_fences::wait(stream_handle s, event_handle e) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return false;
  ctx_scope scope(link_);
  waits_.fetch_add(1, std::memory_order_relaxed);
  return link_.real->cuStreamWaitEvent(to_stream(s), reinterpret_cast<CUevent>(e), 0) ==
         CUDA_SUCCESS;
}

void driver_fences::release(event_handle e) noexcept {
  if (link_.dropped.load(std::memory_order_acquire) || e == 0) return;
  // A released event may still be pending on its stream; re-recording it later is fine (the
  // query then refers to the new recording).
  give_back(reinterpret_cast<CUevent>(e));
}

void trace_observer::on_segment_map(std::uintptr_t base, std::size_t bytes) noexcept {
  trace::segment(true, base, bytes, device_);
}
void trace_observer::on_segment_unmap(std::uintptr_t base, std::size_t bytes) noexcept {
  trace::segment(false, base, bytes, device_);
}
void trace_observer::on_stitch(std::uintptr_t base, std::size_t bytes) noexcept {
  trace::segment(true, base, bytes, device_, true);
}
void trace_observer::on_unstitch(std::uintptr_t base, std::size_t bytes) noexcept {
  trace::segment(false, base, bytes, device_, true);
}
void trace_observer::on_fence(std::uint64_t duration_ns, std::size_t released_bytes) noexcept {
  fence_ns_.fetch_add(duration_ns, std::memory_order_relaxed);
  trace::fence(device_, duration_ns, released_bytes);
}
void trace_observer::on_trim(std::size_t released_bytes) noexcept {
  trace::trim(device_, released_bytes);
}
void trace_observer::on_oom(std::size_t requested_bytes) noexcept {
  pool_stats at_failure;
  if (pool_ != nullptr) at_failure = pool_->stats();
  trace::oom(device_, requested_bytes, at_failure);
  print_oom_notice(device_, requested_bytes, at_failure);
}

} // namespace gmem::shim
