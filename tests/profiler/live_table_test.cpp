#include "profiler/live_table.h"

#include <gtest/gtest.h>
#include <map>
#include <random>
#include <thread>
#include <vector>

namespace gmem::trace {
namespace {

struct table_fixture {
  std::vector<std::uint64_t> slots;
  std::uint64_t overflow = 0, unmatched = 0;
  live_table table;
  explicit table_fixture(std::uint64_t capacity) : slots(capacity * layout::live_word::count, 0) {
    table = live_table(slots.data(), capacity, &overflow, &unmatched);
  }
  std::map<std::uintptr_t, live_entry> read() const {
    std::map<std::uintptr_t, live_entry> out;
    read_live_table(slots.data(), slots.size() / layout::live_word::count,
                    [&](const live_entry& e) { out[e.address] = e; });
    return out;
  }
};

live_entry entry(std::uintptr_t address, std::uint64_t requested) {
  live_entry e;
  e.address = address;
  e.requested = requested;
  e.rounded = (requested + 511) / 512 * 512;
  e.stream = 7;
  e.thread = 99;
  e.stack_id = 3;
  e.device = -1;
  e.kind = alloc_kind::host_pinned;
  return e;
}

TEST(live_table, insert_erase_round_trip) {
  table_fixture f(64);
  ASSERT_TRUE(f.table.insert(entry(0x1000, 100)));
  ASSERT_TRUE(f.table.insert(entry(0x2000, 200)));
  EXPECT_TRUE(f.table.is_valid());
  auto live = f.read();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0x2000].requested, 200u);
  EXPECT_EQ(live[0x2000].rounded, 512u);
  EXPECT_EQ(live[0x2000].device, -1);
  EXPECT_EQ(live[0x2000].kind, alloc_kind::host_pinned);
  EXPECT_EQ(live[0x2000].stack_id, 3u);
  live_entry gone;
  ASSERT_TRUE(f.table.erase(0x1000, &gone));
  EXPECT_EQ(gone.requested, 100u);
  EXPECT_FALSE(f.table.erase(0x1000, nullptr)); // double free: not found, counted
  EXPECT_EQ(f.unmatched, 1u);
  EXPECT_TRUE(f.table.is_valid());
  EXPECT_EQ(f.read().size(), 1u);
}

TEST(live_table, tombstones_are_reused_and_keys_still_found) {
  table_fixture f(64);
  for (int round = 0; round < 50; ++round) {
    for (std::uintptr_t a = 1; a <= 40; ++a)
      ASSERT_TRUE(f.table.insert(entry(a << 12, a)));
    for (std::uintptr_t a = 1; a <= 40; ++a)
      ASSERT_TRUE(f.table.erase(a << 12, nullptr));
  }
  EXPECT_TRUE(f.read().empty());
  EXPECT_EQ(f.overflow, 0u);
  EXPECT_TRUE(f.table.is_valid());
}

TEST(live_table, full_table_counts_overflow_and_corrupts_nothing) {
  table_fixture f(64);
  int stored = 0;
  for (std::uintptr_t a = 1; a <= 100; ++a)
    stored += f.table.insert(entry(a << 8, a));
  EXPECT_EQ(stored, 64);
  EXPECT_EQ(f.overflow, 36u);
  EXPECT_TRUE(f.table.is_valid());
  const auto live = f.read();
  EXPECT_EQ(live.size(), 64u);
  for (const auto& [address, e] : live)
    EXPECT_EQ(e.requested, address >> 8);
}

TEST(live_table, reserved_keys_are_refused) {
  table_fixture f(64);
  EXPECT_FALSE(f.table.insert(entry(0, 1)));
  EXPECT_FALSE(f.table.insert(entry(2, 1)));
  EXPECT_EQ(f.overflow, 2u);
}

TEST(live_table, concurrent_writers_and_a_reader) {
  table_fixture f(1 << 14);
  constexpr int k_threads = 4, k_ops = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&f, t] {
      std::mt19937_64 rng(static_cast<unsigned>(t));
      std::vector<std::uintptr_t> mine;
      for (int i = 0; i < k_ops; ++i) {
        if (mine.size() < 500 && (mine.empty() || rng() % 3 != 0)) {
          const std::uintptr_t a = (static_cast<std::uintptr_t>(t + 1) << 40) | (i + 1) << 9;
          if (f.table.insert(entry(a, a ^ 0x5555))) mine.push_back(a);
        } else {
          const std::size_t k = rng() % mine.size();
          EXPECT_TRUE(f.table.erase(mine[k], nullptr));
          mine[k] = mine.back();
          mine.pop_back();
        }
      }
    });
  std::thread reader([&] {
    for (int pass = 0; pass < 20; ++pass)
      for (const auto& [address, e] : f.read()) {
        EXPECT_EQ(e.requested, address ^ 0x5555);
        EXPECT_EQ(e.stream, 7u);
      }
  });
  for (auto& t : threads)
    t.join();
  reader.join();
  EXPECT_TRUE(f.table.is_valid());
  EXPECT_EQ(f.overflow, 0u);
  EXPECT_EQ(f.unmatched, 0u);
}

} // namespace
} // namespace gmem::trace
