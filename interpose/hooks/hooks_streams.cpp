// Stream creation and destruction: non-blocking streams are registered for the pool's
// device-side barriers (interpose/upstream/stream_registry.h), and a stream that may own
// stream-freed blocks is drained before it goes away. Capture begins wait for a barrier in
// progress.
#include "interpose/capture_tracker.h"
#include "interpose/hooks/hook_support.h"
#include "interpose/upstream/stream_registry.h"

namespace gmem::shim {
namespace {

// Registration is needed only while pools may make barriers; a forked child stands aside.
bool registering() {
  return shim_active() && shim_options().barriers && driver() != nullptr;
}

// Every begin is counted (interpose/capture_tracker.h), also while the shim stands aside: a
// capture begun during exit() may still be open when a late hook checks.
template <typename Begin> CUresult begin_capture(CUstream s, bool per_thread, Begin&& real_begin) {
  return captures().begin(s, per_thread, [&] {
    return registering() ? streams().begin_capture(real_begin) : real_begin();
  });
}

} // namespace
} // namespace gmem::shim

using namespace gmem::shim;

GMEM_HOOK CUresult cuStreamCreate(CUstream* out, unsigned int flags) {
  auto real_create = [&] { return GMEM_REAL(cuStreamCreate, out, flags); };
  if (!registering()) return real_create();
  return streams().create(*driver(), out, flags, real_create);
}

GMEM_HOOK CUresult cuStreamCreateWithPriority(CUstream* out, unsigned int flags, int priority) {
  auto real_create = [&] { return GMEM_REAL(cuStreamCreateWithPriority, out, flags, priority); };
  if (!registering()) return real_create();
  return streams().create(*driver(), out, flags, real_create);
}

// A barrier that found no capture must not see one begin before its last record (the record
// would become a node of the new graph, or touch the legacy stream during the capture). Begins
// and ends are counted so that hooks skip cuStreamIsCapturing while no capture is open.
GMEM_HOOK CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  auto real_begin = [&] { return GMEM_REAL(cuStreamBeginCapture_v2, s, mode); };
  return begin_capture(s, false, real_begin);
}
GMEM_HOOK CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  auto real_begin = [&] { return GMEM_REAL(cuStreamBeginCapture_v2_ptsz, s, mode); };
  return begin_capture(s, true, real_begin);
}
GMEM_HOOK CUresult cuStreamBeginCapture(CUstream s) { // CUDA 10.0 ABI
  auto real_begin = [&] { return GMEM_REAL(cuStreamBeginCapture, s); };
  return begin_capture(s, false, real_begin);
}
GMEM_HOOK CUresult cuStreamBeginCapture_ptsz(CUstream s) {
  auto real_begin = [&] { return GMEM_REAL(cuStreamBeginCapture_ptsz, s); };
  return begin_capture(s, true, real_begin);
}
GMEM_HOOK CUresult cuStreamBeginCaptureToGraph(CUstream s, CUgraph graph,
                                               const CUgraphNode* dependencies,
                                               const CUgraphEdgeData* dependency_data,
                                               std::size_t count, CUstreamCaptureMode mode) {
  auto real_begin = [&] {
    return GMEM_REAL(cuStreamBeginCaptureToGraph, s, graph, dependencies, dependency_data, count,
                     mode);
  };
  return begin_capture(s, false, real_begin);
}
GMEM_HOOK CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph graph,
                                                    const CUgraphNode* dependencies,
                                                    const CUgraphEdgeData* dependency_data,
                                                    std::size_t count, CUstreamCaptureMode mode) {
  auto real_begin = [&] {
    return GMEM_REAL(cuStreamBeginCaptureToGraph_ptsz, s, graph, dependencies, dependency_data,
                     count, mode);
  };
  return begin_capture(s, true, real_begin);
}

GMEM_HOOK CUresult cuStreamEndCapture(CUstream s, CUgraph* graph) {
  auto real_end = [&] { return GMEM_REAL(cuStreamEndCapture, s, graph); };
  const real_driver* real = driver();
  return real != nullptr ? captures().end(*real, s, false, real_end) : real_end();
}
GMEM_HOOK CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph* graph) {
  auto real_end = [&] { return GMEM_REAL(cuStreamEndCapture_ptsz, s, graph); };
  const real_driver* real = driver();
  return real != nullptr ? captures().end(*real, s, true, real_end) : real_end();
}

// A destroyed stream's handle value can come back for a new stream, which would then be handed
// blocks freed on the old one while its work may still run. So before the stream goes away,
// the pool makes the blocks freed on it (the threads' caches' too) wait for a fence, as
// stream-less frees do: the host does not wait, as cuStreamDestroy does not. The stream leaves
// the registry in the same locked step as the driver destroys it (also after exit() started:
// a stale handle must never reach a later barrier).
GMEM_HOOK CUresult cuStreamDestroy_v2(CUstream s) {
  const gmem::stream_handle ps = pool_stream(s, false);
  context_entry* e = shim_active() && ps != gmem::k_no_stream && driver() != nullptr
                         ? pools().find_current(*driver())
                         : nullptr;
  // Another thread's allocation may be sealing s (an event recorded on it, without the pool's
  // lock): that record must be done before the driver frees the stream, and none may start.
  if (e != nullptr) e->device_pool->stream_destroying(ps);
  auto real_destroy = [&] { return GMEM_REAL(cuStreamDestroy_v2, s); };
  const real_driver* real = driver_if_resolved();
  if (real == nullptr || forked_child() || !shim_options().barriers) return real_destroy();
  return streams().destroy(*real, s, real_destroy);
}
