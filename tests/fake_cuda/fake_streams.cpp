// Streams, events, copies and "kernels" of the fake driver. Each stream is a worker thread; an
// event's record completes when the work queued before it has run, and a wait waits for the
// record current at its call (fake::event). All work goes through fake::submit, which adds the
// legacy stream's implicit synchronization with blocking streams.
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "tests/fake_cuda/fake_state.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

using fake::get;

FAKE_API CUresult cuStreamCreate(CUstream* out, unsigned int flags) {
  fake::context* c = fake::current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto* s = new fake::stream(flags, c);
  std::lock_guard lock(get().mu);
  c->streams.push_back(s);
  *out = reinterpret_cast<CUstream>(s);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamCreateWithPriority(CUstream* out, unsigned int flags, int) {
  return cuStreamCreate(out, flags);
}
// Later calls with the handle fail with CUDA_ERROR_INVALID_HANDLE (the real driver's behaviour
// is undefined; the fake makes a stale handle visible).
FAKE_API CUresult cuStreamDestroy_v2(CUstream s) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (reinterpret_cast<std::uintptr_t>(s) <= 2) return CUDA_ERROR_INVALID_HANDLE;
  st->synchronize(); // the thread and object are leaked: other threads may still hold it
  st->destroyed = true;
  return CUDA_SUCCESS;
}
// The context a stream belongs to; the legacy and per-thread handles name the current one's.
FAKE_API CUresult cuStreamGetCtx(CUstream s, CUcontext* ctx) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr || ctx == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *ctx = reinterpret_cast<CUcontext>(st->ctx());
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamSynchronize(CUstream s) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  get().count.stream_syncs++;
  st->synchronize();
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamSynchronize_ptsz(CUstream s) {
  return cuStreamSynchronize(s);
}
FAKE_API CUresult cuStreamQuery(CUstream s) {
  fake::get().count.stream_queries++;
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return st->idle() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
FAKE_API CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  fake::get().count.capture_queries++;
  if (const int us = fake::get().capture_query_us; us > 0) // a slow driver call (tests' races)
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *status = !st->capturing    ? CU_STREAM_CAPTURE_STATUS_NONE
            : st->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                              : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  return cuStreamIsCapturing(s, status);
}
// Capture: only the status is modelled (work queued meanwhile still runs).
FAKE_API CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (st->capturing.exchange(true)) return CUDA_ERROR_ILLEGAL_STATE;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  return cuStreamBeginCapture_v2(s, mode);
}
// The CUDA 10.0 ABI (no mode argument), which the driver still exports under the plain name and
// hands out for versions below 10010: the CUDA 13 runtime asks for it at 10000.
#undef cuStreamBeginCapture
FAKE_API CUresult cuStreamBeginCapture(CUstream s) {
  return cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
FAKE_API CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  return cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL);
}
FAKE_API CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph, const CUgraphNode*,
                                              const CUgraphEdgeData*, std::size_t,
                                              CUstreamCaptureMode mode) {
  return cuStreamBeginCapture_v2(s, mode);
}
FAKE_API CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g, const CUgraphNode* d,
                                                   const CUgraphEdgeData* e, std::size_t n,
                                                   CUstreamCaptureMode mode) {
  return cuStreamBeginCaptureToGraph(s, g, d, e, n, mode);
}
FAKE_API CUresult cuStreamEndCapture(CUstream s, CUgraph* graph) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!st->capturing.exchange(false)) return CUDA_ERROR_ILLEGAL_STATE;
  if (graph != nullptr) *graph = nullptr;
  if (st->invalidated.exchange(false)) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* graph) {
  return cuStreamEndCapture(s, graph);
}

FAKE_API CUresult cuEventCreate(CUevent* out, unsigned int) {
  if (fake::current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *out = reinterpret_cast<CUevent>(new fake::event);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuEventDestroy_v2(CUevent) {
  return CUDA_SUCCESS; // leaked: a queued completion may still refer to it
}
FAKE_API CUresult cuEventRecord(CUevent e, CUstream s) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr || e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  get().count.event_records++;
  st->event_records++;
  auto* ev = reinterpret_cast<fake::event*>(e);
  fake::submit(st, [ev, record = ev->record()] { ev->complete(record); });
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuEventRecord_ptsz(CUevent e, CUstream s) {
  return cuEventRecord(e, s);
}
FAKE_API CUresult cuEventQuery(CUevent e) {
  get().count.event_queries++;
  auto* ev = reinterpret_cast<fake::event*>(e);
  return ev->done(ev->latest()) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
FAKE_API CUresult cuEventSynchronize(CUevent e) {
  auto* ev = reinterpret_cast<fake::event*>(e);
  ev->wait(ev->latest());
  return CUDA_SUCCESS;
}
// The context barrier (CUDA 12.5). The record completes once every stream of the context has
// run the work submitted to it before the call; the wait makes all work submitted to the
// context afterwards, on every stream, later ones included, wait for it (fake::submit). Both
// refuse while a stream of the context captures and invalidate that capture (its
// cuStreamEndCapture then fails), as the driver does. FAKE_CUDA_CONTEXT_BARRIER=noop makes both
// succeed without doing anything (to show that the reuse-hazard tests catch a missing barrier).
FAKE_API CUresult cuCtxRecordEvent(CUcontext ctx, CUevent e) {
  auto* c = reinterpret_cast<fake::context*>(ctx);
  auto* ev = reinterpret_cast<fake::event*>(e);
  std::vector<fake::stream*> streams;
  {
    std::lock_guard lock(get().mu);
    if (c == nullptr || !fake::live_context(c)) return CUDA_ERROR_INVALID_CONTEXT;
    streams = c->streams;
  }
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  get().count.ctx_records++;
  if (fake::invalidate_captures(c)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (get().context_barrier_noop) return CUDA_SUCCESS;
  const pid_t self = getpid();
  std::erase_if(streams, [self](fake::stream* s) { return s->destroyed || s->owner() != self; });
  std::lock_guard order(c->order_mu);
  auto remaining = std::make_shared<std::atomic<std::size_t>>(streams.size());
  auto complete = [ev, record = ev->record()] { ev->complete(record); };
  if (streams.empty()) complete();
  for (fake::stream* s : streams) {
    s->enqueue([remaining, complete] {
      if (remaining->fetch_sub(1) == 1) complete();
    });
  }
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxWaitEvent(CUcontext ctx, CUevent e) {
  auto* c = reinterpret_cast<fake::context*>(ctx);
  auto* ev = reinterpret_cast<fake::event*>(e);
  {
    std::lock_guard lock(get().mu);
    if (c == nullptr || !fake::live_context(c)) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  get().count.ctx_waits++;
  if (fake::invalidate_captures(c)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (get().context_barrier_noop) return CUDA_SUCCESS;
  std::lock_guard order(c->order_mu);
  std::erase_if(c->waits, [](const fake::context_wait& w) { return w.ev->done(w.waited); });
  c->waits.push_back({++c->wait_seq, ev, ev->latest()});
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr || e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  get().count.stream_waits++;
  auto* ev = reinterpret_cast<fake::event*>(e);
  fake::submit(st, [ev, waited = ev->latest()] { ev->wait(waited); });
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int f) {
  return cuStreamWaitEvent(s, e, f);
}

FAKE_API CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  fake::submit(st, [fn, data] { fn(data); });
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data) {
  return cuLaunchHostFunc(s, fn, data);
}

FAKE_API CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, std::size_t n, CUstream s) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  fake::submit(st, [dst, value, n] { std::memset(reinterpret_cast<void*>(dst), value, n); });
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char value, std::size_t n,
                                       CUstream s) {
  return cuMemsetD8Async(dst, value, n, s);
}
FAKE_API CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, std::size_t n) {
  if (CUresult r = cuMemsetD8Async(dst, value, n, nullptr); r != CUDA_SUCCESS) return r;
  return cuStreamSynchronize(nullptr);
}
// Synchronous copies run on the legacy stream (after the blocking streams' earlier work).
FAKE_API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, std::size_t n) {
  fake::stream* st = fake::resolve_stream(nullptr);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  fake::submit(st, [dst, src, n] { std::memcpy(reinterpret_cast<void*>(dst), src, n); });
  st->synchronize();
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, std::size_t n) {
  fake::stream* st = fake::resolve_stream(nullptr);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  fake::submit(st, [dst, src, n] { std::memcpy(dst, reinterpret_cast<const void*>(src), n); });
  st->synchronize();
  return CUDA_SUCCESS;
}

FAKE_API CUresult fakeLaunchKernel(CUstream s, unsigned sleep_us, CUdeviceptr dst,
                                   unsigned char value, std::size_t bytes) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  fake::submit(st, [=] {
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    std::memset(reinterpret_cast<void*>(dst), value, bytes);
  });
  return CUDA_SUCCESS;
}
FAKE_API CUresult fakeStreamEventRecords(CUstream s, std::uint64_t* count) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr || count == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *count = st->event_records.load();
  return CUDA_SUCCESS;
}
FAKE_API CUresult fakeSetCapturing(CUstream s, int capturing) {
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  st->capturing = capturing != 0;
  return CUDA_SUCCESS;
}
FAKE_API void fakeGetCounters(fake_cuda_counters* out) {
#define FAKE_CUDA_COPY(n) out->n = get().count.n.load();
  FAKE_CUDA_COUNTERS(FAKE_CUDA_COPY)
#undef FAKE_CUDA_COPY
  if (out->smallest_alloc == ~std::uint64_t{0}) out->smallest_alloc = 0;
}
FAKE_API void fakeResetCounters() {
  const std::uint64_t live = get().count.live_allocs;
#define FAKE_CUDA_ZERO(n) get().count.n = 0;
  FAKE_CUDA_COUNTERS(FAKE_CUDA_ZERO)
#undef FAKE_CUDA_ZERO
  get().count.smallest_alloc = ~std::uint64_t{0};
  get().count.live_allocs = live;
}
