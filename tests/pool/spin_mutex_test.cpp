// The pool's lock: mutual exclusion under contention, and the sleeping path (a holder that
// keeps the lock far longer than the spin phase) never loses a wake-up.
#include "common/spin_mutex.h"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace gmem {
namespace {

TEST(spin_mutex, excludes_under_contention) {
  spin_mutex mu;
  std::uint64_t counter = 0; // plain: a data race here would lose increments (and TSan says so)
  constexpr int k_threads = 8, k_each = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < k_each; ++i) {
        std::lock_guard lock(mu);
        ++counter;
      }
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(counter, std::uint64_t{k_threads} * k_each);
}

TEST(spin_mutex, sleepers_wake_when_a_long_holder_unlocks) {
  spin_mutex mu;
  int entered = 0;
  for (int round = 0; round < 20; ++round) {
    mu.lock();
    std::vector<std::thread> waiters;
    for (int t = 0; t < 4; ++t)
      waiters.emplace_back([&] {
        std::lock_guard lock(mu);
        ++entered;
      });
    // Long enough for every waiter to pass its spin phase and sleep on the futex.
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    mu.unlock();
    for (auto& t : waiters)
      t.join(); // a lost wake-up hangs here
  }
  EXPECT_EQ(entered, 20 * 4);
  EXPECT_TRUE(mu.try_lock());
  mu.unlock();
}

} // namespace
} // namespace gmem
