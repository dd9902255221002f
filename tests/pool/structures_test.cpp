// The pool's building blocks on their own: the size-binned free index, the address map and
// the block-start bitmap.
#include "pool/address_map.h"
#include "pool/block.h"
#include "pool/free_index.h"
#include "pool/start_bitmap.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

namespace gmem {
namespace {

TEST(free_index_test, bins_are_exact_below_16k_and_1_in_32_above) {
  for (std::size_t g = 1; g < 32; ++g)
    EXPECT_EQ(free_index::bin_of(g * 512), g);
  EXPECT_EQ(free_index::bin_of(32 * 512), 32u);
  EXPECT_EQ(free_index::bin_of(33 * 512), 33u);
  EXPECT_EQ(free_index::bin_of(64 * 512), 64u);
  EXPECT_EQ(free_index::bin_of(65 * 512), 64u); // 64 and 65 granules share a bin
  unsigned last = 0;
  for (std::size_t size = 512; size < (std::size_t{1} << 40); size += size / 7 / 512 * 512 + 512) {
    unsigned b = free_index::bin_of(size);
    EXPECT_GE(b, last);
    EXPECT_LT(b, free_index::k_bins);
    last = b;
  }
}

TEST(free_index_test, finds_a_fitting_block_close_to_the_best) {
  std::mt19937_64 rng(7);
  std::vector<block> blocks(2000);
  free_index index;
  std::multiset<std::size_t> sizes;
  for (auto& b : blocks) {
    b.size = (1 + rng() % 100000) * 512;
    index.insert(&b);
    sizes.insert(b.size);
  }
  ASSERT_TRUE(index.is_valid());
  for (int i = 0; i < 2000; ++i) {
    std::size_t want = (1 + rng() % 110000) * 512;
    block* got = index.find_fit(want);
    auto best = sizes.lower_bound(want);
    if (best == sizes.end()) {
      EXPECT_EQ(got, nullptr);
      continue;
    }
    ASSERT_NE(got, nullptr);
    EXPECT_GE(got->size, want);
    // Within the bin granularity of the best fit: at most 1/16 larger (two bins).
    EXPECT_LE(got->size, *best + *best / 16 + 512) << want;
    if (i % 2 == 0) { // take it out, as an allocation would
      index.remove(got);
      sizes.erase(sizes.find(got->size));
    }
  }
  EXPECT_TRUE(index.is_valid());
  EXPECT_EQ(index.count(), sizes.size());
  EXPECT_EQ(index.largest()->size, *sizes.rbegin());
}

TEST(free_index_test, exact_size_wins_and_empty_index_finds_nothing) {
  free_index index;
  EXPECT_EQ(index.find_fit(512), nullptr);
  EXPECT_EQ(index.largest(), nullptr);
  block a, b, c;
  a.size = 40 * 512;
  b.size = 41 * 512; // same bin as a above 32 granules? 40/41 are in bins 40, 41: exact
  c.size = 1000 * 512;
  for (block* x : {&a, &b, &c})
    index.insert(x);
  EXPECT_EQ(index.find_fit(41 * 512), &b);
  EXPECT_EQ(index.find_fit(42 * 512), &c);
  EXPECT_EQ(index.find_fit(1001 * 512), nullptr);
  index.remove(&b);
  EXPECT_EQ(index.find_fit(41 * 512), &c);
  EXPECT_EQ(index.bytes(), a.size + c.size);
  EXPECT_TRUE(index.is_valid());
}

TEST(free_index_test, deep_bin_is_searched_when_nothing_larger_exists) {
  free_index index;
  std::vector<block> blocks(20);
  // 20 blocks in one log bin (1024..1055 granules), the only fitting one inserted first
  // (so it is last in the list, beyond k_scan).
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].size = (i == 0 ? 1050 : 1024) * 512;
    index.insert(&blocks[i]);
  }
  EXPECT_EQ(index.find_fit(1040 * 512), &blocks[0]);
}

TEST(address_map_test, matches_std_map_under_churn) {
  address_map m;
  std::map<std::uintptr_t, block*> ref;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 200000; ++i) {
    std::uintptr_t key = (1 + rng() % 5000) * 512;
    if (rng() % 2 == 0) {
      if (ref.count(key) == 0) {
        block* v = reinterpret_cast<block*>(key); // never dereferenced
        m.insert(key, v);
        ref[key] = v;
      }
    } else {
      block* got = m.erase(key);
      auto it = ref.find(key);
      ASSERT_EQ(got, it == ref.end() ? nullptr : it->second);
      if (it != ref.end()) ref.erase(it);
    }
    if (i % 10000 == 0) {
      ASSERT_TRUE(m.is_valid());
    }
  }
  EXPECT_EQ(m.size(), ref.size());
  for (auto [k, v] : ref)
    EXPECT_EQ(m.find(k), v);
  EXPECT_EQ(m.find(512 * 7777), nullptr);
  EXPECT_TRUE(m.is_valid());
  // 0 marks an empty slot: asking for it finds nothing and changes nothing.
  const std::size_t n = m.size();
  EXPECT_EQ(m.erase(0), nullptr);
  EXPECT_EQ(m.find(0), nullptr);
  EXPECT_EQ(m.size(), n);
  EXPECT_TRUE(m.is_valid());
  m.clear();
  EXPECT_EQ(m.size(), 0u);
  EXPECT_EQ(m.find(ref.begin()->first), nullptr);
}

TEST(start_bitmap_test, find_prev_matches_a_set) {
  std::mt19937_64 rng(5);
  for (std::size_t n : {1u, 63u, 64u, 65u, 4096u, 300000u}) {
    start_bitmap bm;
    bm.reset(n);
    std::set<std::size_t> ref;
    for (std::size_t i = 0; i < 2000; ++i) {
      std::size_t k = rng() % n;
      if (rng() % 3 == 0) {
        bm.clear(k);
        ref.erase(k);
      } else {
        bm.set(k);
        ref.insert(k);
      }
      std::size_t q = rng() % n;
      auto it = ref.upper_bound(q);
      std::size_t want = it == ref.begin() ? start_bitmap::npos : *std::prev(it);
      ASSERT_EQ(bm.find_prev(q), want) << n << " " << q;
      ASSERT_EQ(bm.test(k), ref.count(k) != 0);
    }
    EXPECT_EQ(bm.count(), ref.size());
    EXPECT_TRUE(bm.is_valid());
  }
}

} // namespace
} // namespace gmem
