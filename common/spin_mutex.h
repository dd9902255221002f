// The pool's lock: uncontended lock+unlock is two atomic operations; a waiter spins briefly
// (critical sections are tens of nanoseconds), then yields its core a few times, and only then
// sleeps on a futex (std::atomic::wait). The yield rounds matter both ways: with more threads
// than cores they let a preempted holder run, and with a core each they keep waiters awake,
// which measured 20-30% faster than sleeping early (hook_bench, 4 and 16 threads on a
// 16-core host; docs/pool.md, "Threads").
#pragma once

#include <sched.h>
#include <time.h>

#include <atomic>
#include <cstdint>

namespace gmem {

class spin_mutex {
public:
  void lock() noexcept {
    if (!try_lock()) lock_slow();
    // Only the holder writes it: a plain increment, kept atomic for readers.
    locks_.store(locks_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  bool try_lock() noexcept {
    std::uint32_t expected = k_unlocked;
    return state_.compare_exchange_strong(expected, k_locked, std::memory_order_acquire);
  }
  void unlock() noexcept {
    // Invariant: state_ is k_contended whenever a thread may be sleeping in lock_slow().
    if (state_.exchange(k_unlocked, std::memory_order_release) == k_contended) state_.notify_one();
  }

  // Contention, for GMEM_VERBOSE: lock() calls, those that found the lock taken, and the time
  // they waited (counted by the waiter once it holds the lock). try_lock() is not counted.
  struct contention {
    std::uint64_t locks = 0, waits = 0, wait_ns = 0;
  };
  contention contention_stats() const noexcept {
    return {locks_.load(std::memory_order_relaxed), waits_.load(std::memory_order_relaxed),
            wait_ns_.load(std::memory_order_relaxed)};
  }

private:
  static constexpr std::uint32_t k_unlocked = 0, k_locked = 1, k_contended = 2;
  static constexpr int k_spins = 128;
  static constexpr int k_yields = 64;

  static std::uint64_t now_ns() noexcept {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    return static_cast<std::uint64_t>(t.tv_sec) * 1000000000u +
           static_cast<std::uint64_t>(t.tv_nsec);
  }
  void lock_slow() noexcept {
    const std::uint64_t start = now_ns();
    acquire_slow();
    waits_.fetch_add(1, std::memory_order_relaxed);
    wait_ns_.fetch_add(now_ns() - start, std::memory_order_relaxed);
  }
  void acquire_slow() noexcept {
    for (int i = 0; i < k_spins; ++i) {
      if (state_.load(std::memory_order_relaxed) == k_unlocked && try_lock()) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    // Yield: a lock holder that lost its core (more threads than cores) runs again; with a
    // core each, sched_yield returns at once and this is a longer spin.
    for (int i = 0; i < k_yields; ++i) {
      if (state_.load(std::memory_order_relaxed) == k_unlocked && try_lock()) return;
      sched_yield();
    }
    // Sleep: mark contended so that unlock() wakes a sleeper.
    while (state_.exchange(k_contended, std::memory_order_acquire) != k_unlocked)
      state_.wait(k_contended, std::memory_order_relaxed);
  }

  std::atomic<std::uint32_t> state_{k_unlocked};
  std::atomic<std::uint64_t> locks_{0}, waits_{0}, wait_ns_{0};
};

// A lock for short critical sections that are rarely contended: one exchange to take it, a
// release store to give it back (spin_mutex spends a second exchange on waking sleepers). A
// waiter spins, then yields its core; it never sleeps.
class spin_lock {
public:
  void lock() noexcept {
    for (int spins = 0; locked_.exchange(true, std::memory_order_acquire);) {
      while (locked_.load(std::memory_order_relaxed)) {
        if (++spins > 64) {
          sched_yield();
        } else {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        }
      }
    }
  }
  void unlock() noexcept {
    locked_.store(false, std::memory_order_release);
  }

private:
  std::atomic<bool> locked_{false};
};

} // namespace gmem
