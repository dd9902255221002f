#include "interpose/capture_tracker.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>

namespace gmem::shim {

capture_tracker& captures() {
  static capture_tracker* t = new capture_tracker; // never destroyed: hooks run during exit
  return *t;
}

capture_tracker::key capture_tracker::key_of(CUstream s, bool per_thread) {
  const auto v = reinterpret_cast<std::uintptr_t>(s);
  const bool thread_default =
      v == reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD) || (per_thread && v == 0);
  return key{thread_default ? reinterpret_cast<std::uintptr_t>(CU_STREAM_PER_THREAD) : v,
             thread_default ? static_cast<std::uintptr_t>(pthread_self()) : 0};
}

bool capture_tracker::still_capturing(const real_driver& real, CUstream s, bool per_thread) {
  auto is_capturing = per_thread ? real.cuStreamIsCapturing_ptsz : real.cuStreamIsCapturing;
  if (is_capturing == nullptr) return true; // cannot tell: keep it open
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = is_capturing(s, &status);
  // A destroyed or invalid handle cannot capture; any capture error means a sequence is still
  // around it.
  if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_CONTEXT) return false;
  return r != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE;
}

void capture_tracker::forget(key k) {
  std::lock_guard lock(mu_);
  auto it = std::find(open_keys_.begin(), open_keys_.end(), k);
  if (it == open_keys_.end()) return; // not begun through a hook, or already ended
  open_keys_.erase(it);
  open_.fetch_sub(1, std::memory_order_seq_cst);
}

bool stream_capturing(const real_driver& real, CUstream s, bool per_thread) {
  auto is_capturing = per_thread ? real.cuStreamIsCapturing_ptsz : real.cuStreamIsCapturing;
  if (is_capturing == nullptr) return false;
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult rc = is_capturing(s, &status);
  if (rc == CUDA_SUCCESS) return status != CU_STREAM_CAPTURE_STATUS_NONE;
  return rc >= CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED &&
         rc <= CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
}

void note_unhooked_lookup(const char* name, bool substituted, int version) {
  if (!substituted && name != nullptr && std::strncmp(name, "cuStreamBeginCapture", 20) == 0)
    captures().untracked(name, version);
}

} // namespace gmem::shim
