// How the pool learns that device work issued before a free can no longer touch a block
// (docs/design.md, "Reuse safety"). The interposer implements it over the real driver
// (cuCtxSynchronize, cuEventRecord/Query, cuStreamWaitEvent, cuEventDestroy); tests use a
// fake whose completion the test controls.
#pragma once

#include <cstdint>

namespace gmem {

using stream_handle = std::uintptr_t; // a CUstream's value; 0 = legacy default stream
inline constexpr stream_handle k_no_stream =
    ~std::uintptr_t{0};              // stream-less alloc/free (cuMemAlloc/cuMemFree)
using event_handle = std::uintptr_t; // 0 = none

// Never called with the pool lock held (see upstream.h for the reason).
class fences {
public:
  virtual ~fences() = default;
  // Waits until all work on all streams issued before the call has finished
  // (cuCtxSynchronize). false = failed; the pool then treats nothing as covered.
  virtual bool synchronize() noexcept = 0;
  // A device-side barrier: all work issued after the call, on every stream that exists or
  // will exist, runs after all work issued before it; the host does not wait (events on
  // every stream, each stream made to wait for the others'). For memory only device work
  // can touch. false = not possible now (a stream is capturing a graph, say, or no driver
  // support): the pool falls back to synchronize(). Used only with pool_options::barriers.
  virtual bool barrier() noexcept { return false; }
  // A mark: an event that completes once all work issued so far, on every stream, has finished
  // (cuCtxRecordEvent alone); later work is not ordered and the host does not wait. 0 = not
  // possible now (a capture may be open, no driver support). query() and release() take it
  // like record()'s events. Used only with pool_options::marks.
  virtual event_handle mark() noexcept { return 0; }
  // An event recorded on `s` now (cuEventRecord). 0 on failure: the pool then keeps the block
  // pending until a full fence.
  virtual event_handle record(stream_handle s) noexcept = 0;
  // Has `e` completed? (cuEventQuery == CUDA_SUCCESS)
  virtual bool query(event_handle e) noexcept = 0;
  // Makes future work on `s` wait for `e` (cuStreamWaitEvent). false = failed.
  virtual bool wait(stream_handle s, event_handle e) noexcept = 0;
  // The pool no longer needs `e` (cuEventDestroy, or back to an event cache).
  virtual void release(event_handle e) noexcept = 0;
};

} // namespace gmem
