// The fake driver's state: contexts, streams (one worker thread each), events and the
// allocation registry. Everything is deliberately leaked at exit: the shim and test threads
// may still call in while static destructors run.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tests/fake_cuda/fake_cuda.h"

namespace fake {

struct context;

// Runs queued work in order on its own thread. Invariant: completed_ <= submitted_.
// Work goes in through fake::submit() (the legacy stream's implicit synchronization); enqueue()
// is the raw queue.
class stream {
public:
  stream(unsigned flags, context* ctx) : flags_(flags), ctx_(ctx), worker_([this] { run(); }) {
    worker_.detach();
  }
  void enqueue(std::function<void()> work) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(work));
    ++submitted_;
    cv_.notify_all();
  }
  void synchronize() { wait_until(submitted()); }
  // Waits until the first `count` pieces of work submitted have run.
  void wait_until(std::uint64_t count) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return completed_ >= count; });
  }
  std::uint64_t submitted() {
    std::lock_guard lock(mu_);
    return submitted_;
  }
  bool idle() {
    std::lock_guard lock(mu_);
    return completed_ == submitted_;
  }
  unsigned flags() const { return flags_; }
  context* ctx() const { return ctx_; }
  pid_t owner() const { return owner_; } // the process its thread runs in
  bool non_blocking() const { return (flags_ & CU_STREAM_NON_BLOCKING) != 0; }
  std::atomic<bool> capturing{false};
  std::atomic<bool> invalidated{false};        // its capture was invalidated (cuCtxRecordEvent)
  std::atomic<bool> destroyed{false};          // cuStreamDestroy: the handle is invalid now
  std::uint64_t context_waits_applied = 0;     // guarded by its context's order_mu
  std::atomic<std::uint64_t> event_records{0}; // cuEventRecord calls on this stream

private:
  void run() {
    for (;;) {
      std::function<void()> work;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work();
      std::lock_guard lock(mu_);
      ++completed_;
      cv_.notify_all();
    }
  }
  unsigned flags_;
  context* ctx_;
  pid_t owner_ = getpid();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  std::thread worker_;
};

// One cuEventRecord / cuCtxRecordEvent of an event: done once the work it follows has run.
// Guarded by its event's mu.
struct event_record {
  bool done = false;
};

// An event stands for its latest record, as in the driver: cuEventQuery and cuEventSynchronize
// ask about the record current at the call; cuStreamWaitEvent and cuCtxWaitEvent wait for that
// record and are not affected by later records of the event. A later record on another stream
// may complete first: it does not complete the earlier one, nor release a wait made before it
// (the pool releases an event to its spares once its waits are made, and records it again).
struct event {
  std::mutex mu;
  std::condition_variable cv;
  std::shared_ptr<event_record> last; // nullptr: never recorded (complete)

  std::shared_ptr<event_record> record() { // a new record becomes the latest
    std::lock_guard lock(mu);
    last = std::make_shared<event_record>();
    return last;
  }
  std::shared_ptr<event_record> latest() {
    std::lock_guard lock(mu);
    return last;
  }
  void complete(const std::shared_ptr<event_record>& r) {
    std::lock_guard lock(mu);
    r->done = true;
    cv.notify_all();
  }
  bool done(const std::shared_ptr<event_record>& r) { // nullptr: nothing to wait for
    std::lock_guard lock(mu);
    return r == nullptr || r->done;
  }
  void wait(const std::shared_ptr<event_record>& r) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return r == nullptr || r->done; });
  }
};

// cuCtxWaitEvent: work submitted to the context after it waits for `ev`'s record `waited`
// (its latest at the call).
struct context_wait {
  std::uint64_t seq;
  event* ev;
  std::shared_ptr<event_record> waited;
};

struct context {
  int device = 0;
  bool primary = false;
  stream* legacy = nullptr;
  std::mutex order_mu;          // serializes submit() on this context's streams
  std::vector<stream*> streams; // created in this context, legacy included (guarded by get().mu)
  // Guarded by order_mu. A stream applies every wait with seq > its context_waits_applied
  // before its next work (streams created later start at 0); completed waits are dropped.
  std::vector<context_wait> waits;
  std::uint64_t wait_seq = 0;
};

// vmm: a cuMemMap'd range (fake_vmm.cpp); ipc: another process's allocation opened with
// cuIpcOpenMemHandle (fake_ipc.cpp).
enum class mem_kind { device, host, managed, vmm, ipc };
struct allocation {
  std::size_t bytes;
  context* ctx;
  mem_kind kind;
  std::uint64_t buffer_id;
  // Storage: -1 = aligned_alloc; otherwise a shared mapping of this memfd (device allocations
  // of at least k_shareable_bytes (256 KiB), so that cuIpcGetMemHandle can hand them to another
  // process), or of another process's memfd (ipc; the fd is closed after mapping: -2).
  int fd = -1;
};
inline constexpr std::size_t k_shareable_bytes = std::size_t{256} << 10;

// Storage for `rounded` zeroed bytes at 512-byte alignment; `*fd` as in allocation::fd.
void* alloc_storage(std::size_t rounded, bool shareable, int* fd);
// Releases what alloc_storage (or an IPC import) made for the allocation at `base`.
void free_storage(std::uintptr_t base, const allocation& a);

struct counters {
#define FAKE_CUDA_ATOMIC(n) std::atomic<std::uint64_t> n{0};
  FAKE_CUDA_COUNTERS(FAKE_CUDA_ATOMIC)
#undef FAKE_CUDA_ATOMIC
};

struct state {
  std::mutex mu; // guards everything below except the counters
  bool initialized = false;
  int device_count = 1;
  std::uint64_t total_bytes = std::uint64_t{1} << 30;
  std::vector<std::uint64_t> used_bytes;       // per device
  std::vector<context*> primary;               // per device
  std::vector<int> primary_refs;               // per device
  std::vector<context*> contexts;              // live, primary ones included
  std::map<std::uintptr_t, allocation> allocs; // by base address
  std::uint64_t next_buffer_id = 1;
  int driver_version = CUDA_VERSION; // FAKE_CUDA_DRIVER_VERSION
  bool context_barrier_noop = false; // FAKE_CUDA_CONTEXT_BARRIER=noop
  int capture_query_us = 0;          // FAKE_CUDA_CAPTURE_QUERY_US: each capture query sleeps
  counters count;
};

state& get();                       // the one instance, created on first use, never destroyed
context*& current();                // this thread's current context (top of its stack)
std::vector<context*>& ctx_stack(); // this thread's pushed contexts below current()
bool live_context(context* c);      // caller holds get().mu
// legacy/per-thread/0 -> the current context's legacy stream; nullptr for a destroyed stream.
stream* resolve_stream(CUstream s);
// Queues `work` on `s` with the legacy stream's implicit synchronization (the driver API's
// "Stream synchronization behavior"): work on the legacy stream first waits for all work
// submitted so far to the context's blocking streams; work on a blocking stream first waits
// for all work submitted so far to the legacy stream; non-blocking streams wait for nothing.
void submit(stream* s, std::function<void()> work);
void synchronize_context(context* c);
// cuCtxRecordEvent / cuCtxWaitEvent refuse while a stream of `c` captures, and invalidate those
// captures, as the real driver does. Returns whether one captured.
bool invalidate_captures(context* c);
const std::map<std::uintptr_t, allocation>::iterator find_allocation(std::uintptr_t address);
void destroy_context_allocations(context* c); // caller holds get().mu

} // namespace fake
