#include "profiler/intern_table.h"

#include <cstring>
#include <gtest/gtest.h>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace gmem::trace {
namespace {

struct intern_fixture {
  std::vector<std::uint64_t> slots;
  std::vector<std::byte> arena;
  std::uint64_t count = 0, overflow = 0, used = 0;
  intern_table table;
  intern_fixture(std::uint64_t capacity, std::uint64_t arena_bytes, std::uint32_t element)
      : slots(capacity * 2, 0), arena(arena_bytes) {
    table = intern_table(slots.data(), capacity, arena.data(), arena_bytes, element, &count,
                         &overflow, &used);
  }
  std::map<std::uint32_t, std::string> read() const {
    std::map<std::uint32_t, std::string> out;
    read_intern_table(slots.data(), slots.size() / 2, arena.data(), arena.size(), 1,
                      [&](std::uint32_t id, std::span<const std::byte> b) {
                        out[id] = std::string(reinterpret_cast<const char*>(b.data()), b.size());
                      });
    return out;
  }
};

TEST(intern_table, equal_stacks_get_one_id) {
  intern_fixture f(64, 8 * 256, 8);
  const std::uintptr_t a[] = {0x401000, 0x402000, 0x403000};
  const std::uintptr_t b[] = {0x401000, 0x402000, 0x403001};
  const std::uint32_t ia = f.table.intern(a, 3);
  EXPECT_NE(ia, 0u);
  EXPECT_EQ(f.table.intern(a, 3), ia);
  const std::uint32_t ib = f.table.intern(b, 3);
  EXPECT_NE(ib, 0u);
  EXPECT_NE(ib, ia);
  EXPECT_NE(f.table.intern(a, 2), ia); // a prefix is another stack
  EXPECT_EQ(f.count, 3u);
  EXPECT_EQ(f.used, 8u); // words
  EXPECT_TRUE(f.table.is_valid());
}

TEST(intern_table, strings_round_trip) {
  intern_fixture f(64, 4096, 1);
  const std::uint32_t hello = f.table.intern("hello", 5);
  const std::uint32_t world = f.table.intern("world!", 6);
  EXPECT_EQ(f.table.intern("hello", 5), hello);
  auto all = f.read();
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(all[hello], "hello");
  EXPECT_EQ(all[world], "world!");
}

TEST(intern_table, full_arena_or_table_counts_overflow) {
  intern_fixture f(64, 16, 1);
  EXPECT_NE(f.table.intern("0123456789", 10), 0u);
  EXPECT_EQ(f.table.intern("abcdefghij", 10), 0u); // arena has 6 bytes left
  EXPECT_EQ(f.overflow, 1u);
  EXPECT_TRUE(f.table.is_valid());
  intern_fixture g(64, 4096, 1);
  int stored = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string s = "label " + std::to_string(i);
    stored += g.table.intern(s.data(), s.size()) != 0;
  }
  EXPECT_EQ(stored, 64);
  EXPECT_EQ(g.overflow, 36u);
  EXPECT_EQ(g.read().size(), 64u);
  EXPECT_EQ(g.table.intern("", 0), 0u); // empty is "none"
}

TEST(intern_table, concurrent_interning_agrees_on_ids) {
  intern_fixture f(1024, 8 * 65536, 8);
  std::vector<std::vector<std::uint32_t>> ids(4, std::vector<std::uint32_t>(200));
  std::map<std::uint32_t, std::vector<std::uintptr_t>> stored;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round)
        for (std::uintptr_t s = 0; s < 200; ++s) {
          const std::uintptr_t ips[4] = {s, s + 1, s * 7, 42};
          const std::uint32_t id = f.table.intern(ips, 4);
          if (round == 0) ids[t][s] = id;
          EXPECT_NE(id, 0u);
        }
    });
  for (auto& t : threads)
    t.join();
  EXPECT_TRUE(f.table.is_valid());
  // Every id names its own stack. (A writer that waits too long for another one may store a
  // stack twice, so ids of two threads may differ; both are valid.)
  EXPECT_GE(f.count, 200u);
  read_intern_table(f.slots.data(), 1024, f.arena.data(), f.arena.size(), 8,
                    [&](std::uint32_t id, std::span<const std::byte> b) {
                      std::vector<std::uintptr_t> ips(b.size() / 8);
                      std::memcpy(ips.data(), b.data(), b.size());
                      stored[id] = ips;
                    });
  for (int t = 0; t < 4; ++t)
    for (std::uintptr_t s = 0; s < 200; ++s)
      EXPECT_EQ(stored[ids[t][s]], (std::vector<std::uintptr_t>{s, s + 1, s * 7, 42}));
}

} // namespace
} // namespace gmem::trace
