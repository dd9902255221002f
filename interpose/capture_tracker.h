// Which streams may be capturing a graph, known from the shim's own hooks, so that the hot
// path (every stream-ordered allocation and free, every barrier) does not ask the driver
// (cuStreamIsCapturing, ~1 driver call per hook) while no capture is open.
//
// Why the hooks see every capture: a stream captures only inside a capture sequence that a
// cuStreamBeginCapture* call opened (other streams join it through events of its streams and
// must rejoin before it ends), and every begin and end goes through the shim on every route
// (exported symbols, dlsym, cuGetProcAddress substitute them by address). While a sequence is
// open anywhere in the process, open() is non-zero and every check asks the driver exactly as
// before (joined streams, the legacy stream during a global capture). Every begin form is
// hooked, the CUDA 10.0 cuStreamBeginCapture(stream) included (the CUDA 13 runtime asks
// cuGetProcAddress for it at version 10000). A begin the shim cannot see (one that dlsym or
// cuGetProcAddress handed out unsubstituted) turns the shortcut off for good: untracked(),
// named in GMEM_VERBOSE's "captures" line.
//
// Invariant: open() >= number of sequences begun through a hook and not yet ended; it only
// errs high (an end the shim did not see leaves it high: slower, and fences that cannot be
// barriers are not made meanwhile, holding more memory; never unsafe).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <vector>

#include "interpose/real_driver.h"

namespace gmem::shim {

class capture_tracker {
public:
  // No stream of the process can be capturing: the driver need not be asked.
  bool none() const { return open_.load(std::memory_order_seq_cst) == 0; }
  // Runs `begin` (the driver's cuStreamBeginCapture*); counted open before the call, so a
  // concurrent check errs on the side of asking the driver.
  template <typename Begin> CUresult begin(CUstream s, bool per_thread, Begin&& call) {
    const key k = key_of(s, per_thread);
    open_.fetch_add(1, std::memory_order_seq_cst);
    const CUresult r = call();
    if (r == CUDA_SUCCESS) {
      std::lock_guard lock(mu_);
      open_keys_.push_back(k);
    } else {
      open_.fetch_sub(1, std::memory_order_seq_cst);
    }
    return r;
  }
  // Runs `end` (the driver's cuStreamEndCapture*). The sequence is closed when the driver
  // ended it: success, or the stream no longer captures (an invalidated or unjoined capture
  // ends too; a wrong-thread end does not).
  template <typename End>
  CUresult end(const real_driver& real, CUstream s, bool per_thread, End&& call) {
    const CUresult r = call();
    if (r != CUDA_SUCCESS && still_capturing(real, s, per_thread)) return r;
    forget(key_of(s, per_thread));
    return r;
  }
  // Never again trust none(). `why`: the lookup that handed out an unhooked begin (kept, the
  // first one, for GMEM_VERBOSE).
  void untracked(const char* name, int version) {
    char why[sizeof why_];
    if (version < 0)
      std::snprintf(why, sizeof why, "dlsym(%s)", name);
    else
      std::snprintf(why, sizeof why, "cuGetProcAddress(%s, %d)", name, version);
    (void)untracked_because(why);
  }
  // The same, for a capture the count missed that showed otherwise (the driver refused a
  // context barrier with a capture error). true the first time the count is turned off.
  bool untracked_because(const char* why) {
    if (untracked_.exchange(true)) return false;
    open_.fetch_add(1, std::memory_order_seq_cst);
    std::snprintf(why_, sizeof why_, "%s", why);
    why_ready_.store(true, std::memory_order_release);
    return true;
  }
  const char* untracked_by() const {
    return why_ready_.load(std::memory_order_acquire) ? why_ : "";
  }
  std::uint64_t open() const { return open_.load(std::memory_order_relaxed); }
  // false once untracked() ran: every check asks the driver (GMEM_VERBOSE prints it).
  bool tracked() const { return !untracked_.load(std::memory_order_relaxed); }

private:
  // A stream handle; the per-thread default stream is a different stream on every thread.
  struct key {
    std::uintptr_t stream;
    std::uintptr_t thread;
    bool operator==(const key&) const = default;
  };
  static key key_of(CUstream s, bool per_thread);
  static bool still_capturing(const real_driver& real, CUstream s, bool per_thread);
  void forget(key k);

  std::atomic<std::uint64_t> open_{0};
  std::atomic<bool> untracked_{false};
  char why_[96] = {}; // written once, before why_ready_
  std::atomic<bool> why_ready_{false};
  std::mutex mu_;
  std::vector<key> open_keys_; // guarded by mu_: one entry per open sequence
};

capture_tracker& captures(); // the process's instance (never destroyed)

// Asks the driver whether `s` is capturing a graph (call only when !captures().none()). A
// capture error (the legacy stream during a global capture) counts as capturing: the driver
// would refuse or record the call. Any other error says nothing about capture: false.
bool stream_capturing(const real_driver& real, CUstream s, bool per_thread);

// Is `name` (as a program passes it to dlsym or cuGetProcAddress) a capture begin that the
// shim did not substitute? Then captures().untracked().
void note_unhooked_lookup(const char* name, bool substituted, int version);

} // namespace gmem::shim
