#include "interpose/upstream/stream_registry.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "interpose/capture_tracker.h"
#include "interpose/shim_state.h"

namespace gmem::shim {
namespace {

// Capturing, or a capture error (the legacy stream while a blocking stream captures), or any
// other failure: no barrier may touch it.
// While no capture is open in the process (interpose/capture_tracker.h), none is capturing; a
// destroyed or failing stream then shows in the barrier's cuStreamQuery.
bool unusable(const real_driver& real, CUstream s) {
  if (captures().none()) return false;
  if (real.cuStreamIsCapturing == nullptr) return true;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  return real.cuStreamIsCapturing(s, &status) != CUDA_SUCCESS ||
         status != CU_STREAM_CAPTURE_STATUS_NONE;
}

bool make_event(const real_driver& real, CUevent& e) {
  return e != nullptr || real.cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS;
}

} // namespace

stream_registry& streams() {
  static stream_registry* r = new stream_registry; // never destroyed: hooks run during exit
  return *r;
}

stream_registry::context_streams& stream_registry::record_locked(const real_driver& real,
                                                                 CUcontext ctx) {
  for (context_streams& c : contexts_) {
    if (c.ctx == ctx) return c;
  }
  context_streams c;
  c.ctx = ctx;
  CUdevice device = -1;
  if (real.cuCtxGetDevice(&device) == CUDA_SUCCESS) {
    c.device = device;
    c.primary = is_primary_context(real, ctx, device);
  }
  contexts_.push_back(std::move(c));
  return contexts_.back();
}

void stream_registry::registered_locked(const real_driver& real, CUcontext ctx, CUstream s) {
  context_streams& c = record_locked(real, ctx);
  c.streams.push_back({s, nullptr});
  if (!c.hub_pending) return;
  if (real.cuEventQuery(c.hub) == CUDA_SUCCESS) {
    c.hub_pending = false;
    return;
  }
  // Made before the hook returns, so the program's first work on s already waits. Should the
  // driver refuse, the host waits for the hub instead: slower, never unsafe.
  if (real.cuStreamWaitEvent(s, c.hub, 0) != CUDA_SUCCESS) {
    (void)real.cuEventSynchronize(c.hub);
    return;
  }
  c.streams.back().waited_hub = c.hub_records;
}

void stream_registry::forget_locked(const real_driver& real, CUstream s) {
  for (context_streams& c : contexts_) {
    auto it = std::find_if(c.streams.begin(), c.streams.end(),
                           [s](const stream_slot& slot) { return slot.stream == s; });
    if (it == c.streams.end()) continue;
    // The event may still be pending; the driver releases it once it completes.
    if (it->event != nullptr) (void)real.cuEventDestroy_v2(it->event);
    c.streams.erase(it);
    return;
  }
}

bool stream_registry::barrier(const real_driver& real, CUcontext ctx) noexcept {
  if (real.cuStreamQuery == nullptr || real.cuEventSynchronize == nullptr) return false;
  CUcontext current = nullptr;
  if (real.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != ctx) return false;
  std::lock_guard lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  context_streams& c = record_locked(real, ctx);
  const bool whole = context_barrier_locked(real, c);
  const bool made = whole || fan_out_locked(real, c);
  if (made) {
    ++stats_.made;
    if (whole) ++stats_.context;
    if (!whole) stats_.streams += c.streams.size();
    stats_.ns +=
        static_cast<unsigned long long>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                            std::chrono::steady_clock::now() - start)
                                            .count());
  }
  return made;
}

bool stream_registry::mark(const real_driver& real, CUcontext ctx, CUevent e) noexcept {
  CUcontext current = nullptr;
  if (real.cuCtxGetCurrent(&current) != CUDA_SUCCESS || current != ctx) return false;
  std::lock_guard lock(mu_);
  return context_record_locked(real, ctx, e);
}

bool stream_registry::context_barrier_locked(const real_driver& real, context_streams& c) noexcept {
#ifdef GMEM_TEST_NOOP_BARRIER
  // The test build whose context barrier orders nothing (tests/gpu/noop_barrier_test.sh): the
  // GPU tests of reuse safety must fail with it.
  (void)real;
  (void)c;
  return shim_options().context_barrier;
#endif
  return make_event(real, c.whole) && context_record_locked(real, c.ctx, c.whole) &&
         real.cuCtxWaitEvent(c.ctx, c.whole) == CUDA_SUCCESS;
}

bool stream_registry::context_record_locked(const real_driver& real, CUcontext ctx,
                                            CUevent e) noexcept {
  // The count is read under mu_, which every counted begin takes after counting itself: no
  // capture can begin between this check and the record.
  if (real.cuCtxRecordEvent == nullptr || !shim_options().context_barrier || !captures().none())
    return false;
  const CUresult r = real.cuCtxRecordEvent(ctx, e);
  if (r == CUDA_SUCCESS) return true;
  if (r >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED && r <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD) {
    // A capture the count did not see, which the driver has now invalidated: never again
    // trust the count, and say so once (the program will see its capture fail).
    if (captures().untracked_because("a capture seen by cuCtxRecordEvent"))
      std::fprintf(stderr, "gmem: warning: a graph capture that gmem did not see began through an "
                           "unhooked route; a context barrier invalidated it; fences now check "
                           "every stream for captures (report this with GMEM_VERBOSE=1 output)\n");
  }
  return false;
}

bool stream_registry::fan_out_locked(const real_driver& real, context_streams& c) noexcept {
  if (unusable(real, CU_STREAM_LEGACY)) return false;
  for (const stream_slot& slot : c.streams) {
    if (unusable(real, slot.stream)) return false;
  }
  // Earlier work of the non-blocking streams -> the legacy stream. An idle stream has none.
  // While the last hub is incomplete, the streams made to wait for it cannot be idle (the
  // wait itself is unfinished work): one query of the hub instead of one per stream.
  // (Not asked without such streams: then a barrier stays one record.)
  const bool hub_incomplete =
      !c.streams.empty() && c.hub_pending && real.cuEventQuery(c.hub) != CUDA_SUCCESS;
  for (stream_slot& slot : c.streams) {
    if (!(hub_incomplete && slot.waited_hub == c.hub_records)) {
      const CUresult q = real.cuStreamQuery(slot.stream);
      if (q == CUDA_SUCCESS) continue;
      if (q != CUDA_ERROR_NOT_READY) return false;
    }
    ++stats_.busy;
    if (!make_event(real, slot.event) ||
        real.cuEventRecord(slot.event, slot.stream) != CUDA_SUCCESS ||
        real.cuStreamWaitEvent(CU_STREAM_LEGACY, slot.event, 0) != CUDA_SUCCESS) {
      return false;
    }
  }
  // The hub: after everything issued so far (blocking streams through the legacy stream's
  // implicit synchronization), and before everything issued later on blocking streams.
  // A failed record leaves the last hub (and hub_pending) as they were.
  if (!make_event(real, c.hub) || real.cuEventRecord(c.hub, CU_STREAM_LEGACY) != CUDA_SUCCESS) {
    return false;
  }
  c.hub_pending = true;
  ++c.hub_records;
  // No non-blocking stream to make wait: done (a stream registered later queries the hub then;
  // the cudaMalloc/cudaFree path of a program without such streams pays one record).
  if (c.streams.empty()) return true;
  // Nothing left to order after (not asked while the last hub was incomplete: this one, later
  // on the same stream, is too).
  if (!hub_incomplete && real.cuEventQuery(c.hub) == CUDA_SUCCESS) {
    c.hub_pending = false;
    return true;
  }
  for (stream_slot& slot : c.streams) {
    if (real.cuStreamWaitEvent(slot.stream, c.hub, 0) != CUDA_SUCCESS) return false;
    slot.waited_hub = c.hub_records;
  }
  return true;
}

bool stream_registry::capture_may_be_open(const real_driver& real, CUcontext ctx) noexcept {
  if (captures().none()) return false;
  if (captures().tracked()) return true;
  std::lock_guard lock(mu_);
  if (unusable(real, CU_STREAM_LEGACY)) return true;
  for (const context_streams& c : contexts_) {
    if (c.ctx != ctx) continue;
    for (const stream_slot& slot : c.streams)
      if (unusable(real, slot.stream)) return true;
  }
  return false;
}

void stream_registry::drop_context(CUcontext ctx) {
  std::lock_guard lock(mu_);
  std::erase_if(contexts_, [ctx](const context_streams& c) { return c.ctx == ctx; });
}

void stream_registry::drop_primary(int device) {
  std::lock_guard lock(mu_);
  std::erase_if(contexts_,
                [device](const context_streams& c) { return c.primary && c.device == device; });
}

stream_registry::barrier_counters stream_registry::stats() {
  std::lock_guard lock(mu_);
  return stats_;
}

} // namespace gmem::shim
