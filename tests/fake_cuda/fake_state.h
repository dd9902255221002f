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
#include <mutex>
#include <thread>
#include <vector>

#include "tests/fake_cuda/fake_cuda.h"

namespace fake {

// Runs queued work in order on its own thread. Invariant: completed_ <= submitted_.
class stream {
public:
  explicit stream(unsigned flags) : flags_(flags), worker_([this] { run(); }) { worker_.detach(); }
  void enqueue(std::function<void()> work) {
    std::lock_guard lock(mu_);
    queue_.push_back(std::move(work));
    ++submitted_;
    cv_.notify_all();
  }
  void synchronize() {
    std::unique_lock lock(mu_);
    const std::uint64_t target = submitted_;
    cv_.wait(lock, [&] { return completed_ >= target; });
  }
  bool idle() {
    std::lock_guard lock(mu_);
    return completed_ == submitted_;
  }
  unsigned flags() const { return flags_; }
  std::atomic<bool> capturing{false};

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
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::uint64_t submitted_ = 0;
  std::uint64_t completed_ = 0;
  std::thread worker_;
};

// Invariant: completed <= recorded. Query succeeds when every recording has run.
struct event {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0;
  std::uint64_t completed = 0;
};

struct context {
  int device = 0;
  bool primary = false;
  stream* legacy = nullptr;
  std::vector<stream*> streams; // created in this context, legacy included
};

enum class mem_kind { device, host, managed };
struct allocation {
  std::size_t bytes;
  context* ctx;
  mem_kind kind;
  std::uint64_t buffer_id;
};

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
  counters count;
};

state& get();                       // the one instance, created on first use, never destroyed
context*& current();                // this thread's current context (top of its stack)
std::vector<context*>& ctx_stack(); // this thread's pushed contexts below current()
bool live_context(context* c);      // caller holds get().mu
stream* resolve_stream(CUstream s); // legacy/per-thread/0 -> the current context's legacy stream
void synchronize_context(context* c);
const std::map<std::uintptr_t, allocation>::iterator find_allocation(std::uintptr_t address);
void destroy_context_allocations(context* c); // caller holds get().mu

} // namespace fake
