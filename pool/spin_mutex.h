// The pool's lock: uncontended lock+unlock is two atomic operations; a waiter spins briefly
// (critical sections are tens of nanoseconds), then yields its core a few times, and only then
// sleeps on a futex (std::atomic::wait). The yield rounds matter both ways: with more threads
// than cores they let a preempted holder run, and with a core each they keep waiters awake,
// which measured 20-30% faster than sleeping early (hook_bench, 4 and 16 threads on a
// 16-core host; docs/pool.md, "Threads").
#pragma once

#include <sched.h>

#include <atomic>
#include <cstdint>

namespace gmem {

class spin_mutex {
public:
  void lock() noexcept {
    if (!try_lock()) lock_slow();
  }
  bool try_lock() noexcept {
    std::uint32_t expected = k_unlocked;
    return state_.compare_exchange_strong(expected, k_locked, std::memory_order_acquire);
  }
  void unlock() noexcept {
    // Invariant: state_ is k_contended whenever a thread may be sleeping in lock_slow().
    if (state_.exchange(k_unlocked, std::memory_order_release) == k_contended) state_.notify_one();
  }

private:
  static constexpr std::uint32_t k_unlocked = 0, k_locked = 1, k_contended = 2;
  static constexpr int k_spins = 128;
  static constexpr int k_yields = 64;

  void lock_slow() noexcept {
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
};

} // namespace gmem
