#include "profiler/format/live_table.h"

#include <gtest/gtest.h>
#include <map>
#include <random>
#include <thread>
#include <vector>

#include "tests/profiler/space_fixture.h"

namespace gmem::trace {
namespace {

struct table_fixture : testing::space_fixture {
  std::uint64_t overflow = 0, unmatched = 0;
  live_table table;
  table_fixture(std::uint32_t shards, std::uint64_t min_slots, std::uint64_t max_slots,
                std::uint64_t bytes = std::uint64_t{8} << 20)
      : space_fixture(bytes) {
    EXPECT_TRUE(
        table.open(&space, h, layout::k_live, shards, min_slots, max_slots, &overflow, &unmatched));
  }
  std::map<std::uintptr_t, live_entry> read() const {
    std::map<std::uintptr_t, live_entry> out;
    std::uint64_t corrupt = 0;
    read_live_table( // the whole buffer: tables published after a size() would look corrupt
        base(), words.size() * 8, h->sections[layout::k_live], h->extents[layout::k_live],
        &h->sections[layout::k_live].dir_version,
        [&](const live_entry& e) { EXPECT_TRUE(out.emplace(e.address, e).second); }, &corrupt);
    EXPECT_EQ(corrupt, 0u);
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

// Allocations are aligned and often consecutive: every shard count in use (1 to 24) must get
// its share of them, or one shard's lock and table take the load of several.
TEST(live_table, shards_share_aligned_addresses_evenly) {
  for (std::uint32_t shards = 1; shards <= 24; ++shards) {
    std::vector<std::uint64_t> count(shards, 0);
    constexpr std::uint64_t n = 1 << 16;
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::uint32_t k = layout::shard_of(0x7f0000000000ull + i * 512, shards);
      ASSERT_LT(k, shards);
      ++count[k];
    }
    for (std::uint32_t k = 0; k < shards; ++k) {
      EXPECT_GT(count[k], n / shards * 9 / 10) << shards << " shards, shard " << k;
      EXPECT_LT(count[k], n / shards * 11 / 10 + 1) << shards << " shards, shard " << k;
    }
  }
}

TEST(live_table, insert_erase_round_trip) {
  table_fixture f(4, 64, 1024);
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
  EXPECT_EQ(f.table.live_count(), 1u);
}

// A free after the program's code ended keeps the slot, marked held; the address handed out
// again replaces it (one slot per address); a later erase clears the mark with the slot.
TEST(live_table, hold_keeps_the_slot_marked_until_the_address_is_reused) {
  table_fixture f(2, 64, 1024);
  ASSERT_TRUE(f.table.insert(entry(0x1000, 100)));
  ASSERT_TRUE(f.table.insert(entry(0x2000, 200)));
  live_entry held;
  ASSERT_TRUE(f.table.hold(0x1000, &held));
  EXPECT_EQ(held.requested, 100u);
  EXPECT_TRUE(f.table.is_valid());
  auto live = f.read();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_TRUE(live[0x1000].held);
  EXPECT_FALSE(live[0x2000].held);
  EXPECT_EQ(live[0x1000].kind, alloc_kind::host_pinned); // the rest of the version word kept
  EXPECT_EQ(live[0x1000].device, -1);
  EXPECT_FALSE(f.table.hold(0x3000, nullptr)); // not present: counted like a double free
  EXPECT_EQ(f.unmatched, 1u);
  ASSERT_TRUE(f.table.insert(entry(0x1000, 300))); // reused: replaces the held slot
  EXPECT_TRUE(f.table.is_valid());
  live = f.read();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0x1000].requested, 300u);
  EXPECT_FALSE(live[0x1000].held);
  EXPECT_EQ(f.table.live_count(), 2u);
  ASSERT_TRUE(f.table.hold(0x2000, nullptr));
  ASSERT_TRUE(f.table.erase(0x2000, nullptr));
  EXPECT_TRUE(f.table.is_valid());
  EXPECT_EQ(f.read().count(0x2000), 0u);
  // Held slots survive a rehash with their mark.
  ASSERT_TRUE(f.table.hold(0x1000, nullptr));
  for (std::uintptr_t a = 1; a <= 500; ++a)
    ASSERT_TRUE(f.table.insert(entry((a + 16) << 12, a)));
  EXPECT_TRUE(f.table.is_valid());
  live = f.read();
  EXPECT_EQ(live.size(), 501u);
  EXPECT_TRUE(live[0x1000].held);
}

TEST(live_table, grows_with_live_entries_and_shrinks_back_after_churn) {
  table_fixture f(2, 64, 1 << 16);
  const std::uint64_t start = f.size();
  for (std::uintptr_t a = 1; a <= 5000; ++a)
    ASSERT_TRUE(f.table.insert(entry(a << 12, a)));
  EXPECT_TRUE(f.table.is_valid());
  EXPECT_EQ(f.read().size(), 5000u);
  const std::uint64_t grown = f.size();
  EXPECT_GT(grown, start + 5000 * 64); // at least a slot per entry, more with rehashing
  EXPECT_LE(grown, start + 5000 * 64 * 16);
  // Free everything but 10, then churn over new addresses: tombstones are cleared by
  // rehashing into small tables, and retired tables are reused: the trace stops growing.
  for (std::uintptr_t a = 11; a <= 5000; ++a)
    ASSERT_TRUE(f.table.erase(a << 12, nullptr));
  for (std::uintptr_t round = 0; round < 200; ++round)
    for (std::uintptr_t a = 1; a <= 100; ++a) {
      const std::uintptr_t address = (round * 1000 + a + 10'000) << 12;
      ASSERT_TRUE(f.table.insert(entry(address, a)));
      ASSERT_TRUE(f.table.erase(address, nullptr));
    }
  EXPECT_TRUE(f.table.is_valid());
  EXPECT_EQ(f.read().size(), 10u);
  EXPECT_LE(f.size(), grown + 2 * 64 * 64 * 2); // at most a few small tables more
  EXPECT_EQ(f.overflow, 0u);
}

TEST(live_table, full_trace_counts_overflow_and_corrupts_nothing) {
  // Room for the header and two 64-slot tables only: no rehash can happen.
  table_fixture f(1, 64, 1 << 16, layout::k_header_bytes + 64 * 64 + 64);
  int stored = 0;
  for (std::uintptr_t a = 1; a <= 100; ++a)
    stored += f.table.insert(entry(a << 8, a));
  EXPECT_EQ(stored, 64);
  EXPECT_EQ(f.overflow, 36u);
  EXPECT_EQ(f.h->growth_refused, 1u); // asked once, then the shard stays as it is
  EXPECT_NE(f.h->flags & layout::k_flag_full, 0u);
  EXPECT_TRUE(f.table.is_valid());
  const auto live = f.read();
  EXPECT_EQ(live.size(), 64u);
  for (const auto& [address, e] : live)
    EXPECT_EQ(e.requested, address >> 8);
}

TEST(live_table, reserved_keys_are_refused) {
  table_fixture f(1, 64, 64);
  EXPECT_FALSE(f.table.insert(entry(0, 1)));
  EXPECT_FALSE(f.table.insert(entry(2, 1)));
  EXPECT_EQ(f.overflow, 2u);
}

TEST(live_table, hostile_directory_is_refused_not_followed) {
  table_fixture f(2, 64, 64);
  ASSERT_TRUE(f.table.insert(entry(0x1000, 1)));
  f.h->extents[layout::k_live][1] = {f.size() - 64, 1 << 20}; // past the image
  std::uint64_t corrupt = 0;
  std::size_t n = 0;
  read_live_table(
      f.base(), f.size(), f.h->sections[layout::k_live], f.h->extents[layout::k_live],
      &f.h->sections[layout::k_live].dir_version, [&](const live_entry&) { ++n; }, &corrupt);
  EXPECT_EQ(corrupt, 1u);
  EXPECT_LE(n, 1u);
}

TEST(live_table, concurrent_writers_and_a_reader_while_shards_grow) {
  table_fixture f(4, 64, 1 << 14, std::uint64_t{32} << 20);
  constexpr int k_threads = 4, k_ops = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&f, t] {
      std::mt19937_64 rng(static_cast<unsigned>(t));
      std::vector<std::uintptr_t> mine;
      for (int i = 0; i < k_ops; ++i) {
        if (mine.size() < 2000 && (mine.empty() || rng() % 3 != 0)) {
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
  EXPECT_EQ(f.read().size(), f.table.live_count());
}

} // namespace
} // namespace gmem::trace
