// The per-thread caches of stream-ordered blocks (pool/thread_cache.h): what they serve
// without the pool's lock, what they must never serve, and how their blocks go back to the
// pool (another thread's free, a double free, a stream being destroyed, a thread's exit, a
// trim, growth). The races are in concurrent_hazard_test.cpp and stress_test.cpp.
#include "pool/pool.h"
#include "pool/thread_cache.h"
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <thread>

namespace gmem::testing {
namespace {

constexpr stream_handle k_s1 = 0x100, k_s2 = 0x200;

struct thread_cache_test : ::testing::Test {
  fake_upstream up;
  fake_fences fe;
  pool p{up, fe, pool_options{}};
  std::uint64_t locks() const { return p.lock_contention().locks; }
};

// The handed-out table: open addressing whose removal shifts entries back, checked against a
// map under churn with clustered addresses (many share a home slot).
TEST(thread_cache_table, matches_a_map_under_churn) {
  auto c = std::make_unique<thread_cache>();
  std::map<std::uintptr_t, std::size_t> model;
  std::mt19937_64 rng(5);
  std::lock_guard lock(c->mu);
  for (int i = 0; i < 200000; ++i) {
    const std::uintptr_t a =
        (std::uintptr_t{1} << 32) + (rng() % 300) * 512 * (rng() % 2 ? 1 : 128);
    const int slot = c->find_locked(a);
    ASSERT_EQ(slot >= 0, model.count(a) == 1);
    if (slot >= 0) {
      ASSERT_EQ(c->table[slot].size, model[a]);
      EXPECT_EQ(c->remove_locked(static_cast<unsigned>(slot)).size, model[a]);
      model.erase(a);
    } else if (model.size() < thread_cache::k_max_handed) {
      const std::size_t size = 512 + rng() % 4096;
      c->insert_locked(thread_cache::handed{a, size, 1, 1});
      model[a] = size;
    }
    ASSERT_EQ(c->handed_count, model.size());
  }
  for (const auto& [a, size] : model) {
    const int slot = c->find_locked(a);
    ASSERT_GE(slot, 0);
    EXPECT_EQ(c->table[slot].size, size);
  }
}

TEST_F(thread_cache_test, a_free_and_the_next_allocation_on_its_stream_take_no_pool_lock) {
  const alloc_result a = p.allocate(64 << 10, k_s1);
  ASSERT_EQ(a.status, pool_status::ok);
  const std::uint64_t before = locks();
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(p.deallocate(a.address, k_s1), pool_status::ok);
    const alloc_result b = p.allocate(40 << 10, k_s1); // smaller, at least half: fits
    ASSERT_EQ(b.address, a.address);
    ASSERT_EQ(b.size, a.size);
    ASSERT_EQ(p.deallocate(b.address, k_s1), pool_status::ok);
    ASSERT_EQ(p.allocate(64 << 10, k_s1).address, a.address);
  }
  EXPECT_EQ(locks(), before);
  const pool_stats s = p.stats();
  EXPECT_EQ(s.live_blocks, 1u);
  EXPECT_EQ(s.live_bytes, a.size);
  EXPECT_EQ(s.live_requested_bytes, 64u << 10);
  EXPECT_EQ(s.total_allocs, 201u);
  EXPECT_EQ(s.total_frees, 200u);
  EXPECT_EQ(s.cache_hits, 200u); // the first allocation mapped a segment
  EXPECT_EQ(s.stream_free_bytes, 0u);
  EXPECT_TRUE(p.is_valid());
  EXPECT_EQ(fe.events.size(), 0u);
}

TEST_F(thread_cache_test, a_cached_block_counts_as_stream_free_and_not_live) {
  const alloc_result a = p.allocate(100 << 10, k_s1);
  ASSERT_EQ(p.deallocate(a.address, k_s1), pool_status::ok);
  const pool_stats s = p.stats();
  EXPECT_EQ(s.live_bytes, 0u);
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.live_requested_bytes, 0u);
  EXPECT_EQ(s.stream_free_bytes, a.size);
  EXPECT_FALSE(p.find(a.address).has_value());
  std::size_t cached = 0;
  p.for_each_segment([&](const segment_view& v) {
    for (const block_view& b : v.blocks)
      if (b.address == a.address) {
        EXPECT_EQ(b.state, block_state::stream_free);
        EXPECT_EQ(b.stream, k_s1);
        ++cached;
      }
  });
  EXPECT_EQ(cached, 1u);
}

// Sizes far apart, another stream, no stream: the pool serves them, never the cached block.
TEST_F(thread_cache_test, only_its_stream_and_a_similar_size_get_a_cached_block) {
  const alloc_result a = p.allocate(64 << 10, k_s1);
  ASSERT_EQ(p.deallocate(a.address, k_s1), pool_status::ok);
  EXPECT_NE(p.allocate(64 << 10, k_s2).address, a.address);
  EXPECT_NE(p.allocate(64 << 10).address, a.address);
  EXPECT_NE(p.allocate(16 << 10, k_s1).address, a.address); // would waste 3/4
  EXPECT_NE(p.allocate(96 << 10, k_s1).address, a.address); // too large
  EXPECT_EQ(p.allocate(64 << 10, k_s1).address, a.address);
}

// The bound on waste, exactly: a cached block serves requests down to half its size, not one
// granule less.
TEST_F(thread_cache_test, a_cached_block_serves_requests_down_to_half_its_size) {
  const alloc_result a = p.allocate(64 << 10, k_s1);
  ASSERT_EQ(p.deallocate(a.address, k_s1), pool_status::ok);
  EXPECT_NE(p.allocate((32 << 10) - k_block_granule, k_s1).address, a.address);
  EXPECT_EQ(p.allocate(32 << 10, k_s1).address, a.address);
}

// A full pool: another stream gets the cached block only once the pool has it back (growth
// is refused), and then only behind an event recorded on the freeing stream after the free.
TEST_F(thread_cache_test, another_stream_gets_a_cached_block_only_through_the_pool) {
  pool full(up, fe, one_segment_options());
  const std::vector<std::uintptr_t> blocks = fill_segment(full, 64 << 10, k_s1);
  ASSERT_EQ(full.deallocate(blocks[3], k_s1), pool_status::ok);
  const std::uint64_t freed = fe.now();
  const alloc_result b = full.allocate(64 << 10, k_s2);
  ASSERT_EQ(b.status, pool_status::ok);
  EXPECT_EQ(b.address, blocks[3]);
  EXPECT_TRUE(fe.waited_since(k_s2, k_s1, freed) || fe.fenced_since(freed));
  EXPECT_TRUE(full.is_valid());
}

TEST_F(thread_cache_test, a_free_by_another_thread_takes_the_block_back_from_the_cache) {
  const alloc_result a = p.allocate(64 << 10, k_s1);
  std::thread([&] { EXPECT_EQ(p.deallocate(a.address, k_s2), pool_status::ok); }).join();
  pool_stats s = p.stats();
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.total_frees, 1u);
  // The owner's table let go of it: its free now is a double free, and its allocation on k_s1
  // does not get the block (freed on k_s2) from its cache.
  EXPECT_EQ(p.deallocate(a.address, k_s1), pool_status::invalid);
  const std::uint64_t before = locks();
  const alloc_result b = p.allocate(64 << 10, k_s1);
  EXPECT_GT(locks(), before);
  EXPECT_EQ(p.deallocate(b.address, k_s1), pool_status::ok);
  s = p.stats();
  EXPECT_EQ(s.invalid_frees, 1u);
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(thread_cache_test, a_double_free_of_a_cached_block_is_invalid_from_any_thread) {
  const alloc_result a = p.allocate(64 << 10, k_s1);
  ASSERT_EQ(p.deallocate(a.address, k_s1), pool_status::ok);
  EXPECT_EQ(p.deallocate(a.address, k_s1), pool_status::invalid);
  EXPECT_EQ(p.deallocate(a.address), pool_status::invalid);
  std::thread([&] { EXPECT_EQ(p.deallocate(a.address, k_s1), pool_status::invalid); }).join();
  EXPECT_EQ(p.stats().invalid_frees, 3u);
  // Handed out once only.
  const alloc_result b = p.allocate(64 << 10, k_s1), c = p.allocate(64 << 10, k_s1);
  EXPECT_EQ(b.address, a.address);
  EXPECT_NE(c.address, a.address);
  EXPECT_TRUE(p.is_valid());
}

// A stream-less free of a block served on a stream is pending until a fence, as without caches.
TEST_F(thread_cache_test, a_stream_less_free_goes_to_the_pool_pending) {
  const alloc_result a = p.allocate(64 << 10, k_s1);
  ASSERT_EQ(p.deallocate(a.address), pool_status::ok);
  const pool_stats s = p.stats();
  EXPECT_EQ(s.pending_bytes, a.size);
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_NE(p.allocate(64 << 10, k_s1).address, a.address);
}

// A stream handle comes back after cuStreamDestroy: the blocks cached for the old stream must
// not reach the new one without a fence. The pool is full, so the block moves only through it.
TEST_F(thread_cache_test, a_destroyed_streams_blocks_leave_the_cache) {
  pool full(up, fe, one_segment_options());
  const std::vector<std::uintptr_t> blocks = fill_segment(full, 64 << 10, k_s1);
  ASSERT_EQ(full.deallocate(blocks[0], k_s1), pool_status::ok);
  full.stream_destroying(k_s1);
  EXPECT_EQ(full.stats().pending_bytes, 64u << 10); // the pool waits for a fence
  const std::uint64_t fences = full.stats().fences;
  EXPECT_EQ(full.allocate(64 << 10, k_s1).address, blocks[0]); // a new stream, same handle
  EXPECT_EQ(full.stats().fences, fences + 1);
  EXPECT_TRUE(full.is_valid());
}

TEST_F(thread_cache_test, a_threads_exit_returns_its_free_blocks_and_keeps_its_live_ones) {
  alloc_result kept;
  std::thread([&] {
    const alloc_result a = p.allocate(64 << 10, k_s1), b = p.allocate(128 << 10, k_s1);
    const alloc_result c = p.allocate(200 << 10, k_s1);
    ASSERT_EQ(p.deallocate(c.address, k_s1), pool_status::ok);
    kept = p.allocate(150 << 10, k_s1); // c again, from the cache
    ASSERT_EQ(kept.address, c.address);
    ASSERT_EQ(p.deallocate(a.address, k_s1), pool_status::ok);
    ASSERT_EQ(p.deallocate(b.address, k_s1), pool_status::ok);
  }).join();
  pool_stats s = p.stats();
  EXPECT_EQ(s.live_blocks, 1u);
  EXPECT_EQ(s.live_bytes, kept.size);
  EXPECT_EQ(s.live_requested_bytes, 150u << 10);
  EXPECT_EQ(s.total_allocs, 4u);
  EXPECT_EQ(s.total_frees, 3u);
  EXPECT_EQ(p.deallocate(kept.address, k_s1), pool_status::ok);
  s = p.stats();
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.live_requested_bytes, 0u);
  EXPECT_EQ(s.total_frees, 4u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(thread_cache_test, trim_takes_the_caches_free_blocks) {
  const alloc_result a = p.allocate(512 << 10, k_s1);
  ASSERT_EQ(p.deallocate(a.address, k_s1), pool_status::ok);
  EXPECT_EQ(p.stats().live_blocks, 0u);
  p.trim();
  // The pool has it now (stream-free on k_s1): the next allocation takes the pool's lock.
  const std::uint64_t before = locks();
  EXPECT_EQ(p.allocate(512 << 10, k_s1).address, a.address);
  EXPECT_GT(locks(), before);
}

// A full segment: another stream's request takes the cached block (through an event) before
// the pool maps a second segment.
TEST_F(thread_cache_test, growth_comes_after_the_caches_free_blocks) {
  std::vector<std::uintptr_t> blocks;
  for (int i = 0; i < 4; ++i)
    blocks.push_back(p.allocate(512 << 10, k_s1).address);
  ASSERT_EQ(up.maps, 1u);
  ASSERT_EQ(p.deallocate(blocks[2], k_s1), pool_status::ok);
  const std::uint64_t freed = fe.now();
  const alloc_result b = p.allocate(512 << 10, k_s2);
  EXPECT_EQ(b.address, blocks[2]);
  EXPECT_EQ(up.maps, 1u);
  EXPECT_TRUE(fe.waited_since(k_s2, k_s1, freed) || fe.fenced_since(freed));
  EXPECT_TRUE(p.is_valid());
}

// Blocks beyond the bounds go back to the pool, oldest first; the cache never holds more.
TEST_F(thread_cache_test, the_cache_keeps_a_bounded_number_of_free_blocks) {
  std::vector<alloc_result> live;
  for (int i = 0; i < 20; ++i)
    live.push_back(p.allocate(4096, k_s1));
  for (const alloc_result& r : live)
    ASSERT_EQ(p.deallocate(r.address, k_s1), pool_status::ok);
  const pool_stats s = p.stats();
  EXPECT_LE(s.stream_free_bytes, 20u * 4096); // pool's and caches' together
  EXPECT_EQ(s.live_blocks, 0u);
  EXPECT_EQ(s.total_frees, 20u);
  std::size_t cached = 0;
  p.for_each_segment([&](const segment_view& v) {
    for (const block_view& b : v.blocks)
      cached += b.state == block_state::stream_free ? 1 : 0;
  });
  EXPECT_LE(cached, 20u);
  EXPECT_TRUE(p.is_valid());
}

// Past a bound, only the oldest blocks that take the cache back under it go to the pool (one
// free at a time, so no free pays for a batch: the stream-ordered path's p99): the newest
// stay, and the next allocations take them without the pool's lock.
TEST_F(thread_cache_test, past_a_bound_only_the_oldest_blocks_over_it_go_back) {
  auto keeps_newest = [&](std::size_t bytes, int frees, std::size_t kept) {
    std::vector<std::uintptr_t> freed;
    for (int i = 0; i < frees; ++i)
      freed.push_back(p.allocate(bytes, k_s1).address);
    for (std::uintptr_t a : freed)
      ASSERT_EQ(p.deallocate(a, k_s1), pool_status::ok);
    const std::set<std::uintptr_t> newest(freed.end() - static_cast<std::ptrdiff_t>(kept),
                                          freed.end());
    const std::uint64_t before = locks();
    std::set<std::uintptr_t> got;
    for (std::size_t i = 0; i < kept; ++i)
      got.insert(p.allocate(bytes, k_s1).address);
    EXPECT_EQ(got, newest) << bytes << "-byte blocks";
    EXPECT_EQ(locks(), before) << bytes << "-byte blocks";
    for (std::uintptr_t a : got)
      ASSERT_EQ(p.deallocate(a, k_s1), pool_status::ok);
    EXPECT_TRUE(p.is_valid());
  };
  keeps_newest(4096, 20, thread_cache::k_max_free); // the count: 16 of 20
  keeps_newest(thread_cache::k_max_block, 3,        // the bytes: 8 MiB of 12
               thread_cache::k_max_free_bytes / thread_cache::k_max_block);
}

// abandon() (the context is gone) lets go of the caches: a later pair on a stream is the
// pool's, not a double free of a block no table lists.
TEST_F(thread_cache_test, after_abandon_the_pool_serves_without_the_caches) {
  const alloc_result a = p.allocate(64 << 10, k_s1);
  ASSERT_EQ(p.deallocate(a.address, k_s1), pool_status::ok);
  p.abandon();
  const alloc_result b = p.allocate(64 << 10, k_s1);
  ASSERT_EQ(b.status, pool_status::ok);
  EXPECT_EQ(p.deallocate(b.address, k_s1), pool_status::ok);
  EXPECT_EQ(p.stats().invalid_frees, 0u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(thread_cache_test, off_every_stream_free_goes_to_the_pool) {
  pool_options o;
  o.thread_caches = false;
  pool q(up, fe, o);
  const alloc_result a = q.allocate(64 << 10, k_s1);
  ASSERT_EQ(q.deallocate(a.address, k_s1), pool_status::ok);
  const std::uint64_t before = q.lock_contention().locks;
  EXPECT_EQ(q.allocate(64 << 10, k_s1).address, a.address);
  EXPECT_GT(q.lock_contention().locks, before);
}

} // namespace
} // namespace gmem::testing
