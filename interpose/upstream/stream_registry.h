// The device-side barrier behind fences::barrier (docs/design.md, "Reuse safety"): all work
// issued after the barrier, on any stream of the context that exists or will exist, runs after
// all work issued before it, on any stream; the host does not wait.
//
// Two ways to make it, in the pool's context:
//
// The context barrier (drivers of CUDA 12.5 and later): cuCtxRecordEvent(ctx, e) captures all
// work of the context issued so far, cuCtxWaitEvent(ctx, e) makes all work submitted to the
// context afterwards wait for it, streams created later included. Two driver calls (~0.7 us on
// an H100), whatever the number of streams. The record fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED while any stream of the context captures a graph AND
// invalidates that capture, so it is made only while the shim knows that no capture is open in
// the process (interpose/capture_tracker.h: every begin route is counted; an unhooked begin
// handed out turns the count off for good). Should the driver still refuse it with a capture
// error (a capture the count missed, now lost to the program), the count is turned off for
// good with that reason (GMEM_VERBOSE "captures" line) and a warning is printed once.
//
// The fan-out, used when the driver has no context barrier, while a capture may be open, or
// when the context barrier failed. Why it covers every stream (the driver API's "Stream
// synchronization behavior"): an action on the legacy default stream first waits for all
// blocking streams (created with flags 0, and the per-thread default streams), and blocking
// streams then wait for it. Only CU_STREAM_NON_BLOCKING streams escape that, so they are the
// ones registered here (hooks on cuStreamCreate / cuStreamCreateWithPriority /
// cuStreamDestroy_v2). A fan-out barrier:
//   1. refuse (false: the pool synchronizes instead) when the legacy stream or a registered
//      stream is capturing a graph: an event recorded there would become a node of the user's
//      graph, and touching the legacy stream during a global capture invalidates it;
//   2. for each registered stream with unfinished work: record its event, make the legacy
//      stream wait for it (a stream made to wait for a hub that has not completed has
//      unfinished work: no query needed);
//   3. record the hub event on the legacy stream: it completes after every earlier piece of
//      work of every stream of the context;
//   4. unless the hub is already complete, make every registered stream wait for it, and keep
//      it: a non-blocking stream created while it may be incomplete waits for it before its
//      creation hook returns.
// With no non-blocking stream this is one cuEventRecord (and no query: a stream registered
// later queries the hub itself).
//
// Capture begins (cuStreamBeginCapture*, hooked) are counted and then run under the same mutex
// as barriers, so a barrier's capture check (the count, or the fan-out's per-stream queries)
// holds until its last driver call.
//
// Invariant: every registered stream is live (registration and unregistration happen under
// mu_, together with the driver's own create / destroy), so a barrier never touches a destroyed
// handle and no stream is created between a barrier's snapshot and its registration. Records of
// destroyed contexts are dropped (their streams and events went with them).
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

#include "interpose/real_driver.h"

namespace gmem::shim {

class stream_registry {
public:
  // Runs `create` (the driver's cuStreamCreate*, which fills *out) with the registry locked;
  // a new non-blocking stream of the current context is registered and made to wait for the
  // context's last barrier.
  template <typename Create>
  CUresult create(const real_driver& real, CUstream* out, unsigned flags, Create&& create) {
    CUcontext ctx = nullptr;
    if ((flags & CU_STREAM_NON_BLOCKING) == 0 || out == nullptr ||
        real.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr) {
      return create(); // blocking streams follow the legacy stream; errors are the driver's
    }
    std::lock_guard lock(mu_);
    const CUresult r = create();
    if (r == CUDA_SUCCESS) registered_locked(real, ctx, *out);
    return r;
  }
  // Runs `destroy` (the driver's cuStreamDestroy) with the registry locked, after forgetting s.
  template <typename Destroy>
  CUresult destroy(const real_driver& real, CUstream s, Destroy&& destroy) {
    std::lock_guard lock(mu_);
    forget_locked(real, s);
    return destroy();
  }
  // Runs `begin` (the driver's cuStreamBeginCapture*) with the registry locked: a capture
  // never begins between a barrier's capture check and its records.
  template <typename Begin> CUresult begin_capture(Begin&& begin) {
    std::lock_guard lock(mu_);
    return begin();
  }
  // The barrier above for `ctx`, which must be current. false: not made (capture, a driver
  // error); the caller synchronizes instead.
  bool barrier(const real_driver& real, CUcontext ctx) noexcept;
  // The context barrier's first half alone (fences::mark): `e` records all work of `ctx`
  // (current) issued so far; later work is not ordered. false: not made (no context barrier in
  // the driver or GMEM_CONTEXT_BARRIER=0, a capture may be open, a driver error).
  bool mark(const real_driver& real, CUcontext ctx, CUevent e) noexcept;
  // May a stream of `ctx` (current) be capturing a graph? While the capture count is trusted:
  // whether any counted capture is open in the process. Once it is not (an unhooked begin was
  // handed out): whether the driver says the legacy stream or a registered stream captures.
  bool capture_may_be_open(const real_driver& real, CUcontext ctx) noexcept;
  // The context is being destroyed / the device's primary context reset or released.
  void drop_context(CUcontext ctx);
  void drop_primary(int device);
  // Totals over every barrier made (GMEM_VERBOSE): how many, how many of them were context
  // barriers, registered streams looked at and those with unfinished work (fan-outs), and
  // host time inside barrier() with the registry locked.
  struct barrier_counters {
    unsigned long long made = 0, context = 0, streams = 0, busy = 0, ns = 0;
  };
  barrier_counters stats();

private:
  struct stream_slot {
    CUstream stream = nullptr;
    CUevent event = nullptr;      // created at its first barrier, re-recorded by each one
    std::uint64_t waited_hub = 0; // the hub record it was made to wait for (0: none)
  };
  struct context_streams {
    CUcontext ctx = nullptr;
    int device = -1;
    bool primary = false;
    std::vector<stream_slot> streams;
    CUevent whole = nullptr;       // the context barrier's event, re-recorded by each one
    CUevent hub = nullptr;         // recorded on the legacy stream by the last fan-out
    bool hub_pending = false;      // the last barrier's hub may not have completed yet
    std::uint64_t hub_records = 0; // records of the hub so far: the current one's number
  };
  context_streams& record_locked(const real_driver& real, CUcontext ctx); // ctx current
  void registered_locked(const real_driver& real, CUcontext ctx, CUstream s);
  void forget_locked(const real_driver& real, CUstream s);
  bool context_barrier_locked(const real_driver& real, context_streams& c) noexcept;
  // cuCtxRecordEvent(ctx, e) when no capture can be open; a capture error turns the count off.
  bool context_record_locked(const real_driver& real, CUcontext ctx, CUevent e) noexcept;
  bool fan_out_locked(const real_driver& real, context_streams& c) noexcept;

  std::mutex mu_;
  std::vector<context_streams> contexts_; // guarded by mu_
  barrier_counters stats_;                // guarded by mu_
};

stream_registry& streams(); // the process's instance (never destroyed)

} // namespace gmem::shim
