// gmem_bench::start_gate (alloc_harness.h): the benchmarks' threads start timing together.
#include "alloc_harness.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

namespace {

TEST(start_gate, every_thread_gets_the_last_arrival_as_its_start) {
  constexpr int k_threads = 8;
  gmem_bench::start_gate gate(k_threads);
  std::vector<std::uint64_t> arrived(k_threads), start(k_threads), returned(k_threads);
  std::vector<std::thread> ts;
  for (int i = 0; i < k_threads; ++i)
    ts.emplace_back([&, i] {
      // Setups of different lengths, as a thread that waits for the driver has.
      std::this_thread::sleep_for(std::chrono::milliseconds(3 * i));
      arrived[static_cast<std::size_t>(i)] = gmem_bench::now_ns();
      start[static_cast<std::size_t>(i)] = gate.arrive();
      returned[static_cast<std::size_t>(i)] = gmem_bench::now_ns();
    });
  for (auto& t : ts)
    t.join();
  std::uint64_t last_arrival = 0;
  for (std::uint64_t a : arrived)
    last_arrival = std::max(last_arrival, a);
  for (int i = 0; i < k_threads; ++i) {
    const auto k = static_cast<std::size_t>(i);
    EXPECT_EQ(start[k], start[0]) << "thread " << i;
    EXPECT_GE(start[k], last_arrival) << "thread " << i << " started before the last arrival";
    EXPECT_GE(returned[k], start[k]) << "thread " << i;
  }
}

TEST(start_gate, one_thread_starts_at_once) {
  gmem_bench::start_gate gate(1);
  const std::uint64_t before = gmem_bench::now_ns();
  const std::uint64_t start = gate.arrive();
  EXPECT_GE(start, before);
  EXPECT_LE(start, gmem_bench::now_ns());
}

} // namespace
