// The pool's device-side barriers (interpose/upstream/stream_registry.h) against the fake driver,
// whose streams keep the legacy stream's implicit synchronization: a slow "kernel" of the old owner
// writes a block after the program freed it (cuMemFree: stream-less); the same address comes
// back from cuMemAlloc without a host synchronization; the new owner's write must land after
// the old one. Each line printed: "NAME reused=R host_syncs=H ... corrupted=C".
//
// Stream kinds: legacy (CU_STREAM_LEGACY), blocking (flags 0), nonblocking
// (CU_STREAM_NON_BLOCKING, through cuStreamCreateWithPriority), later (non-blocking, created
// after the allocation that made the barrier).
#include <algorithm>
#include <thread>
#include <vector>

#include "tests/interpose/probe_check.h"

namespace probe {
namespace {

// Oversize (above the 20 MiB default): a segment of its own, so the freed block is the only
// one that fits and the allocation fences instead of carving a new block.
constexpr std::size_t k_bytes = std::size_t{32} << 20;
constexpr unsigned k_slow_us = 300000;

CUstream make_stream(const std::string& kind) {
  CUstream s = nullptr;
  if (kind == "legacy") return CU_STREAM_LEGACY;
  if (kind == "blocking") {
    CHECK_CU(g.stream_create(&s, 0));
  } else if (kind == "nonblocking" || kind == "later") {
    CHECK_CU(g.stream_create_with_priority(&s, CU_STREAM_NON_BLOCKING, 0));
  } else {
    CHECK(false, "unknown stream kind '%s'", kind.c_str());
  }
  return s;
}

std::uint64_t records_on(CUstream s) {
  std::uint64_t n = 0;
  CHECK_CU(g.stream_event_records(s, &n));
  return n;
}

struct reuse_result {
  bool reused = false;
  std::uint64_t host_syncs = 0; // cuCtxSynchronize calls made by the reallocation
  bool corrupted = false;
};

// The old owner writes 0xAA on `old_stream` after k_slow_us; the block is freed and allocated
// again; `before_alloc` runs just before the reallocation, `after_alloc` just after it (and
// returns the new owner's stream), which writes 0xBB at once.
template <typename Before, typename After>
reuse_result reuse(CUstream old_stream, Before&& before_alloc, After&& after_alloc) {
  reuse_result r;
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(g.mem_alloc(&a, k_bytes));
  CHECK_CU(g.launch_kernel(old_stream, k_slow_us, a, 0xAA, k_bytes));
  CHECK_CU(g.mem_free(a));
  before_alloc();
  fake_cuda_counters before{}, after{};
  g.get_counters(&before);
  CHECK_CU(g.mem_alloc(&b, k_bytes));
  g.get_counters(&after);
  const CUstream new_stream = after_alloc();
  CHECK_CU(g.launch_kernel(new_stream, 0, b, 0xBB, k_bytes));
  CHECK_CU(g.ctx_synchronize());
  std::vector<unsigned char> host(k_bytes);
  CHECK_CU(g.memcpy_dtoh(host.data(), b, k_bytes));
  r.reused = a == b;
  r.host_syncs = after.ctx_syncs - before.ctx_syncs;
  r.corrupted = std::any_of(host.begin(), host.end(), [](unsigned char c) { return c != 0xBB; });
  CHECK_CU(g.mem_free(b));
  return r;
}

} // namespace

int scenario_barrier(const std::string& old_kind, const std::string& new_kind) {
  const CUstream old_stream = make_stream(old_kind);
  CUstream new_stream = new_kind == "later" ? nullptr : make_stream(new_kind);
  const reuse_result r = reuse(
      old_stream, [] {},
      [&] {
        if (new_kind == "later") new_stream = make_stream(new_kind);
        return new_stream;
      });
  std::printf("barrier %s->%s reused=%d host_syncs=%llu corrupted=%d\n", old_kind.c_str(),
              new_kind.c_str(), r.reused ? 1 : 0, static_cast<unsigned long long>(r.host_syncs),
              r.corrupted ? 1 : 0);
  return r.corrupted ? 3 : 0;
}

// Two barriers while the first one's hub is still incomplete (a slow kernel on the legacy
// stream holds it back). The second barrier does not query the streams made to wait for that
// hub, it takes them as busy: stream X, behind the first hub, has the old owner's slow write
// to block B queued after its wait; B is freed and allocated again at once, and the new
// owner's write on stream Y must still land after X's. (Taking X as idle because it was idle
// at the first barrier would let Y's write run first.) Prints "barrier_chain ...".
int scenario_barrier_chain() {
  const CUstream x = make_stream("nonblocking");
  const CUstream y = make_stream("nonblocking");
  CUdeviceptr a = 0, a2 = 0, b = 0, b2 = 0;
  CHECK_CU(g.mem_alloc(&a, k_bytes));
  CHECK_CU(g.mem_alloc(&b, k_bytes));
  // Barrier 1: A's old owner is slow on the legacy stream; X and Y are idle and wait for the hub.
  CHECK_CU(g.launch_kernel(CU_STREAM_LEGACY, k_slow_us, a, 0xAA, k_bytes));
  CHECK_CU(g.mem_free(a));
  CHECK_CU(g.mem_alloc(&a2, k_bytes));
  // Barrier 2, hub 1 incomplete: B's old owner on X, queued behind X's wait for hub 1.
  CHECK_CU(g.launch_kernel(x, k_slow_us / 2, b, 0xAA, k_bytes));
  CHECK_CU(g.mem_free(b));
  fake_cuda_counters before{}, after{};
  g.get_counters(&before);
  CHECK_CU(g.mem_alloc(&b2, k_bytes));
  g.get_counters(&after);
  CHECK_CU(g.launch_kernel(y, 0, b2, 0xBB, k_bytes));
  CHECK_CU(g.launch_kernel(y, 0, a2, 0xBB, k_bytes));
  CHECK_CU(g.ctx_synchronize());
  std::vector<unsigned char> host(k_bytes);
  bool corrupted = false;
  for (CUdeviceptr p : {a2, b2}) {
    CHECK_CU(g.memcpy_dtoh(host.data(), p, k_bytes));
    corrupted |= std::any_of(host.begin(), host.end(), [](unsigned char c) { return c != 0xBB; });
  }
  std::printf("barrier_chain reused=%d host_syncs=%llu corrupted=%d\n", a == a2 && b == b2 ? 1 : 0,
              static_cast<unsigned long long>(after.ctx_syncs - before.ctx_syncs),
              corrupted ? 1 : 0);
  CHECK_CU(g.mem_free(a2));
  CHECK_CU(g.mem_free(b2));
  return corrupted ? 3 : 0;
}

// A stream capturing a graph (a registered non-blocking one, or the legacy stream, marked by
// the fake; "begin": a non-blocking one through cuStreamBeginCapture / cuStreamEndCapture, which
// the shim hooks): no barrier, no event recorded on it (it would join the user's graph), and no
// context synchronization (it would invalidate the capture): the block stays pending.
int scenario_barrier_capture(const std::string& capturing_kind) {
  const CUstream slow = make_stream("nonblocking");
  const CUstream other = make_stream("nonblocking");
  const CUstream capturing =
      capturing_kind == "legacy" ? CU_STREAM_LEGACY : make_stream("nonblocking");
  const bool begin = capturing_kind == "begin";
  // Otherwise a capture opened on `origin` through the driver, and the fake marks `capturing`:
  // a stream that joined it (through an event of a capturing stream, which the shim does not
  // see), or the legacy stream during a global capture.
  const CUstream origin = begin ? capturing : make_stream("nonblocking");
  std::uint64_t records = 0;
  const reuse_result r = reuse(
      slow,
      [&] {
        CHECK_CU(g.stream_begin_capture(origin, CU_STREAM_CAPTURE_MODE_RELAXED));
        if (!begin) CHECK_CU(g.set_capturing(capturing, 1));
        records = records_on(capturing);
      },
      [&] {
        records = records_on(capturing) - records;
        CUgraph graph = nullptr;
        if (!begin) CHECK_CU(g.set_capturing(capturing, 0));
        CHECK_CU(g.stream_end_capture(origin, &graph));
        return other;
      });
  std::printf("barrier_capture %s reused=%d host_syncs=%llu capture_records=%llu corrupted=%d\n",
              capturing_kind.c_str(), r.reused ? 1 : 0,
              static_cast<unsigned long long>(r.host_syncs),
              static_cast<unsigned long long>(records), r.corrupted ? 1 : 0);
  return r.corrupted ? 3 : 0;
}

// A capture open on another thread while this one frees and allocates again: the shim counts
// the begin (every form, on every route), so the pool's fence cannot be a context barrier
// (which would invalidate the capture); the capture then ends normally. `form`: "v2"
// (cuStreamBeginCapture_v2, or _ptsz on the per-thread route), "10000" (the CUDA 10.0 form),
// "to_graph" (cuStreamBeginCaptureToGraph). Prints "barrier_capture_thread FORM ...
// capture_ended=E"; E=0 means the capture was invalidated.
int scenario_barrier_capture_thread(const std::string& form) {
  const CUstream slow = make_stream("nonblocking");
  const CUstream other = make_stream("nonblocking");
  const CUstream capturing = make_stream("nonblocking");
  CUcontext ctx = nullptr;
  CHECK_CU(g.primary_retain(&ctx, 0)); // the probe's current context
  CUresult ended = CUDA_ERROR_UNKNOWN;
  std::thread capturer;
  const reuse_result r = reuse(
      slow,
      [&] {
        capturer = std::thread([&] {
          CHECK_CU(g.ctx_set_current(ctx));
          if (form == "10000") {
            CHECK_CU(g.stream_begin_capture_10000(capturing));
          } else if (form == "to_graph") {
            // (the fake ignores the graph; the real driver needs one)
            CHECK_CU(g.stream_begin_capture_to_graph(capturing, nullptr, nullptr, nullptr, 0,
                                                     CU_STREAM_CAPTURE_MODE_RELAXED));
          } else {
            CHECK_CU(g.stream_begin_capture(capturing, CU_STREAM_CAPTURE_MODE_RELAXED));
          }
        });
        capturer.join(); // open on the other thread while this one fences
      },
      [&] {
        capturer = std::thread([&] {
          CHECK_CU(g.ctx_set_current(ctx));
          CUgraph graph = nullptr;
          ended = g.stream_end_capture(capturing, &graph);
        });
        capturer.join();
        return other;
      });
  std::printf("barrier_capture_thread %s reused=%d host_syncs=%llu capture_ended=%d corrupted=%d\n",
              form.c_str(), r.reused ? 1 : 0, static_cast<unsigned long long>(r.host_syncs),
              ended == CUDA_SUCCESS ? 1 : 0, r.corrupted ? 1 : 0);
  return r.corrupted ? 3 : 0;
}

// A capture that began where the shim could not count it (the fake marks a stream capturing
// without any begin call): the context barrier's record meets it, the driver refuses and
// invalidates it, and the shim stops trusting its count (GMEM_VERBOSE "captures ... tracked=0");
// the driver then reports the stream capturing, so no fence is made. A second fence, after the
// capture ended, fans out.
int scenario_barrier_capture_unseen() {
  const CUstream slow = make_stream("nonblocking");
  const CUstream other = make_stream("nonblocking");
  const CUstream capturing = make_stream("nonblocking");
  const reuse_result r1 = reuse(
      slow, [&] { CHECK_CU(g.set_capturing(capturing, 1)); },
      [&] {
        CHECK_CU(g.set_capturing(capturing, 0));
        return other;
      });
  const reuse_result r2 = reuse(
      slow, [] {}, [&] { return other; });
  std::printf("barrier_capture_unseen reused=%d,%d host_syncs=%llu,%llu corrupted=%d\n",
              r1.reused ? 1 : 0, r2.reused ? 1 : 0, static_cast<unsigned long long>(r1.host_syncs),
              static_cast<unsigned long long>(r2.host_syncs), r1.corrupted || r2.corrupted ? 1 : 0);
  return r1.corrupted || r2.corrupted ? 3 : 0;
}

// A destroyed non-blocking stream leaves the registry: the next barrier does not touch its
// handle (the fake refuses it, which would make the barrier fail and the pool synchronize).
int scenario_barrier_destroyed() {
  const CUstream gone = make_stream("nonblocking");
  CHECK_CU(g.stream_destroy(gone));
  const CUstream slow = make_stream("nonblocking");
  const CUstream other = make_stream("nonblocking");
  const reuse_result r = reuse(
      slow, [] {}, [&] { return other; });
  std::printf("barrier_destroyed reused=%d host_syncs=%llu corrupted=%d\n", r.reused ? 1 : 0,
              static_cast<unsigned long long>(r.host_syncs), r.corrupted ? 1 : 0);
  return r.corrupted ? 3 : 0;
}

// Pinned host memory never gets barriers (the CPU touches it without any stream): reusing a
// freed pinned block takes a host synchronization.
void scenario_barrier_host() {
  void* a = nullptr;
  void* b = nullptr;
  CHECK_CU(g.mem_host_alloc(&a, k_bytes, 0));
  CHECK_CU(g.mem_free_host(a));
  fake_cuda_counters before{}, after{};
  g.get_counters(&before);
  CHECK_CU(g.mem_host_alloc(&b, k_bytes, 0));
  g.get_counters(&after);
  std::printf("barrier_host reused=%d host_syncs=%llu\n", a == b ? 1 : 0,
              static_cast<unsigned long long>(after.ctx_syncs - before.ctx_syncs));
  CHECK_CU(g.mem_free_host(b));
}

} // namespace probe
