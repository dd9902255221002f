#include "profiler/format/intern_table.h"

#include <cstring>
#include <gtest/gtest.h>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tests/profiler/space_fixture.h"

namespace gmem::trace {
namespace {

struct intern_fixture : testing::space_fixture {
  std::uint64_t count = 0, overflow = 0, used = 0;
  intern_table table;
  std::uint32_t element;
  intern_fixture(std::uint64_t first_slots, std::uint64_t max_slots, std::uint64_t first_arena,
                 std::uint64_t max_arena, std::uint32_t element_bytes,
                 std::uint64_t bytes = std::uint64_t{4} << 20)
      : space_fixture(bytes), element(element_bytes) {
    EXPECT_TRUE(table.open(&space, h, layout::k_string_slots, layout::k_string_bytes, element_bytes,
                           first_slots, max_slots, first_arena, max_arena, &count, &overflow,
                           &used));
  }
  std::map<std::uint32_t, std::string> read(std::uint64_t* corrupt = nullptr) const {
    std::map<std::uint32_t, std::string> out;
    const std::uint64_t bad = read_intern_table(
        base(), size(), h->sections[layout::k_string_slots], h->extents[layout::k_string_slots],
        h->sections[layout::k_string_bytes], h->extents[layout::k_string_bytes], element,
        [&](std::uint32_t id, std::span<const std::byte> b) {
          out[id] = std::string(reinterpret_cast<const char*>(b.data()), b.size());
        });
    if (corrupt) *corrupt = bad;
    return out;
  }
};

// Every word and byte of the input counts: stacks that differ in one word (at any place, in any
// of the hash's lanes) or in length, and strings that differ in one trailing byte, hash apart.
TEST(intern_table, the_hash_sees_every_word_and_the_length) {
  std::set<std::uint64_t> seen;
  std::size_t inputs = 0;
  std::uint64_t words[40];
  for (std::size_t len = 1; len <= 40; ++len) {
    for (std::size_t k = 0; k < len; ++k)
      words[k] = 0x7f0000001000ull + 0x40 * k;
    seen.insert(hash_bytes(words, len * 8));
    ++inputs;
    for (std::size_t at = 0; at < len; ++at) {
      words[at] += 8;
      seen.insert(hash_bytes(words, len * 8));
      words[at] -= 8;
      ++inputs;
    }
  }
  char text[] = "profiler/format/intern_table.cpp:42 in hash_bytes";
  for (std::size_t len = 1; len < sizeof text; ++len) {
    seen.insert(hash_bytes(text, len));
    text[len - 1] ^= 0x20; // the same length, another last byte
    seen.insert(hash_bytes(text, len));
    text[len - 1] ^= 0x20;
    inputs += 2;
  }
  EXPECT_EQ(seen.size(), inputs);
  EXPECT_EQ(hash_bytes(words, 33 * 8), hash_bytes(words, 33 * 8));
}

TEST(intern_table, equal_stacks_get_one_id) {
  intern_fixture f(64, 4096, 256, 4096, 8);
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
  intern_fixture f(64, 4096, 256, 4096, 1);
  const std::uint32_t hello = f.table.intern("hello", 5);
  const std::uint32_t world = f.table.intern("world!", 6);
  EXPECT_EQ(f.table.intern("hello", 5), hello);
  auto all = f.read();
  EXPECT_EQ(all.size(), 2u);
  EXPECT_EQ(all[hello], "hello");
  EXPECT_EQ(all[world], "world!");
}

TEST(intern_table, levels_and_arena_chunks_grow_and_ids_stay) {
  intern_fixture f(64, 1 << 16, 64, 1 << 20, 1);
  std::map<std::uint32_t, std::string> ids;
  for (int i = 0; i < 3000; ++i) {
    const std::string s = "label number " + std::to_string(i);
    const std::uint32_t id = f.table.intern(s.data(), s.size());
    ASSERT_NE(id, 0u);
    ids[id] = s;
  }
  EXPECT_GT(f.h->sections[layout::k_string_slots].extent_count, 3u); // 64, 128, 256, ...
  EXPECT_GT(f.h->sections[layout::k_string_bytes].extent_count, 3u);
  EXPECT_EQ(f.overflow, 0u);
  EXPECT_TRUE(f.table.is_valid());
  EXPECT_EQ(f.read(), ids);
  for (const auto& [id, s] : ids) // found again in whichever level holds it
    EXPECT_EQ(f.table.intern(s.data(), s.size()), id);
}

TEST(intern_table, full_arena_or_table_counts_overflow) {
  intern_fixture f(64, 64, 16, 16, 1);
  EXPECT_NE(f.table.intern("0123456789", 10), 0u);
  EXPECT_EQ(f.table.intern("abcdefghij", 10), 0u); // arena has 6 bytes left
  EXPECT_EQ(f.overflow, 1u);
  EXPECT_TRUE(f.table.is_valid());
  intern_fixture g(64, 64, 4096, 4096, 1);
  int stored = 0;
  for (int i = 0; i < 100; ++i) {
    const std::string s = "label " + std::to_string(i);
    stored += g.table.intern(s.data(), s.size()) != 0;
  }
  EXPECT_GE(stored, 32); // one level of 64 slots, no room for a second
  EXPECT_LE(stored, 64);
  EXPECT_EQ(g.overflow, static_cast<std::uint64_t>(100 - stored));
  EXPECT_EQ(g.read().size(), static_cast<std::size_t>(stored));
  EXPECT_EQ(g.table.intern("", 0), 0u); // empty is "none"
}

TEST(intern_table, hostile_refs_are_refused) {
  intern_fixture f(64, 4096, 256, 4096, 1);
  const std::uint32_t id = f.table.intern("hello", 5);
  ASSERT_NE(id, 0u);
  // Point the slot's ref past its chunk.
  std::uint64_t* slots = f.space.words(f.h->extents[layout::k_string_slots][0].offset);
  for (int i = 0; i < 64; ++i)
    if (slots[2 * i] != 0) slots[2 * i + 1] = layout::slot_word::pack(f.size() - 2, 100, 1);
  std::uint64_t corrupt = 0;
  EXPECT_TRUE(f.read(&corrupt).empty());
  EXPECT_EQ(corrupt, 1u);
}

TEST(intern_table, concurrent_interning_agrees_on_ids) {
  intern_fixture f(64, 1 << 14, 256, 1 << 20, 8, std::uint64_t{8} << 20);
  std::vector<std::vector<std::uint32_t>> ids(4, std::vector<std::uint32_t>(2000));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (std::uintptr_t s = 0; s < 2000; ++s) {
          const std::uintptr_t ips[4] = {s, s + 1, s * 7, 42};
          const std::uint32_t id = f.table.intern(ips, 4);
          if (round == 0) ids[t][s] = id;
          EXPECT_NE(id, 0u);
        }
    });
  for (auto& t : threads)
    t.join();
  EXPECT_TRUE(f.table.is_valid());
  EXPECT_EQ(f.count, 2000u); // stored under a lock: never twice
  std::map<std::uint32_t, std::vector<std::uintptr_t>> stored;
  read_intern_table(f.base(), f.size(), f.h->sections[layout::k_string_slots],
                    f.h->extents[layout::k_string_slots], f.h->sections[layout::k_string_bytes],
                    f.h->extents[layout::k_string_bytes], 8,
                    [&](std::uint32_t id, std::span<const std::byte> b) {
                      std::vector<std::uintptr_t> ips(b.size() / 8);
                      std::memcpy(ips.data(), b.data(), b.size());
                      stored[id] = ips;
                    });
  for (int t = 0; t < 4; ++t)
    for (std::uintptr_t s = 0; s < 2000; ++s)
      EXPECT_EQ(stored[ids[t][s]], (std::vector<std::uintptr_t>{s, s + 1, s * 7, 42}));
}

} // namespace
} // namespace gmem::trace
