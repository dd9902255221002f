// The arena (pool_options::arena): growth where it ends, free space merging across growths,
// page-wise trims that cut segments, concurrent growth joining segments, the limit.
#include "pool/pool.h"
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

#include <thread>

namespace gmem::testing {
namespace {

constexpr std::size_t k_page = 2 * k_mib;

// Applies what the observer hears to a map of segments: a trace's view of the pool.
struct segment_mirror : pool_observer {
  void on_segment_map(std::uintptr_t base, std::size_t bytes) noexcept override {
    std::lock_guard lock(mu);
    if (!segments.emplace(base, bytes).second) ++bad;
  }
  void on_segment_unmap(std::uintptr_t base, std::size_t bytes) noexcept override {
    std::lock_guard lock(mu);
    auto it = segments.find(base);
    if (it == segments.end() || it->second != bytes)
      ++bad;
    else
      segments.erase(it);
  }
  // The mirror holds exactly the pool's segments.
  bool matches(const pool& p) {
    std::map<std::uintptr_t, std::size_t> want;
    p.for_each_segment([&](const segment_view& v) { want.emplace(v.base, v.size); });
    std::lock_guard lock(mu);
    return bad == 0 && want == segments;
  }
  std::mutex mu;
  std::map<std::uintptr_t, std::size_t> segments;
  std::size_t bad = 0;
};

struct arena_fixture : ::testing::Test {
  arena_fixture() { up.page = k_page; }
  pool_options arena_options() {
    pool_options o;
    o.arena = true;
    return o;
  }
  std::size_t arena_segments(pool& p) {
    std::size_t n = 0;
    p.for_each_segment(
        [&](const segment_view& v) { n += v.base >= fake_upstream::k_arena_base ? 1 : 0; });
    return n;
  }
  // The arena as the fence-first tests need it: A and B (4 MiB each, side by side) pending,
  // G (2 MiB, live) between them and C (12 MiB, free), H (2 MiB, live) between C and the tip.
  struct pending_beside_free {
    std::uintptr_t a, b, g, c, h;
  };
  static pending_beside_free pending_beside_free_block(pool& p) {
    pending_beside_free l{};
    l.a = p.allocate(4 * k_mib).address;
    l.b = p.allocate(4 * k_mib).address;
    l.g = p.allocate(2 * k_mib).address;
    l.c = p.allocate(12 * k_mib).address;
    l.h = p.allocate(2 * k_mib).address;
    EXPECT_EQ(p.deallocate(l.c), pool_status::ok);
    p.end_external_fence(p.begin_external_fence()); // C: free
    EXPECT_EQ(p.deallocate(l.a), pool_status::ok);  // A and B: pending, 8 MiB together
    EXPECT_EQ(p.deallocate(l.b), pool_status::ok);
    return l;
  }
  fake_upstream up;
  fake_fences fe;
  segment_mirror mirror;
};

TEST_F(arena_fixture, grows_where_it_ends_and_free_space_merges_across_growths) {
  pool p(up, fe, arena_options());
  const std::uintptr_t a = p.allocate(3 * k_mib).address; // maps 4 MiB: 1 MiB stays free
  ASSERT_GE(a, fake_upstream::k_arena_base);
  EXPECT_EQ(p.stats().reserved_bytes, 4 * k_mib);
  // 2 MiB: the free 1 MiB at the end is extended by one page, not left behind.
  const std::uintptr_t b = p.allocate(2 * k_mib).address;
  EXPECT_EQ(b, a + 3 * k_mib);
  EXPECT_EQ(p.stats().reserved_bytes, 6 * k_mib);
  const std::uintptr_t c = p.allocate(5 * k_mib).address;
  EXPECT_EQ(c, b + 2 * k_mib);
  EXPECT_EQ(p.stats().segments, 1u);
  EXPECT_EQ(p.stats().segment_maps, 3u);
  // Freed, the three blocks of three growths are one free block: 10 MiB fit without growth.
  for (std::uintptr_t x : {a, b, c})
    ASSERT_EQ(p.deallocate(x), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  EXPECT_EQ(p.stats().largest_free_block, p.stats().reserved_bytes);
  const std::size_t maps = up.maps;
  EXPECT_EQ(p.allocate(10 * k_mib).address, a);
  EXPECT_EQ(up.maps, maps);
  EXPECT_TRUE(p.is_valid());
  EXPECT_EQ(up.bad_extends, 0u);
}

// Pending blocks that could cover a request are fenced before any free block is taken
// (pool_impl::fence_first_locked, here with fence_batch 1: as soon as they could cover one):
// they merge with their free neighbours and serve it, and the free block stays whole for the
// next request. Taking the free block first splits it, and the next request makes the arena
// grow.
TEST_F(arena_fixture, pending_blocks_that_could_serve_a_request_are_fenced_first) {
  pool_options o = arena_options();
  o.fence_batch = 1;
  pool p(up, fe, o);
  const auto [a, b, g, c, h] = pending_beside_free_block(p);
  const std::size_t reserved = p.stats().reserved_bytes;
  const std::uint64_t fences = p.stats().fences;
  // C fits 8 MiB, but A and B could cover it: fence first; A+B serve it.
  EXPECT_EQ(p.allocate(8 * k_mib).address, a);
  EXPECT_EQ(p.stats().fences, fences + 1);
  EXPECT_EQ(p.stats().pending_bytes, 0u);
  // C is still whole for 12 MiB: no growth.
  EXPECT_EQ(p.allocate(12 * k_mib).address, c);
  EXPECT_EQ(p.stats().reserved_bytes, reserved);
  // Pending bytes below the request: no fence before taking a free block.
  ASSERT_EQ(p.deallocate(g), pool_status::ok);
  ASSERT_EQ(p.deallocate(c), pool_status::ok);
  p.end_external_fence(p.begin_external_fence()); // C: free again (G merged into it)
  ASSERT_EQ(p.deallocate(a), pool_status::ok);    // 8 MiB pending
  EXPECT_EQ(p.allocate(10 * k_mib).address, g);
  EXPECT_EQ(p.stats().fences, fences + 2);
  EXPECT_EQ(p.stats().pending_bytes, 8 * k_mib);
  ASSERT_EQ(p.deallocate(h), pool_status::ok);
  EXPECT_TRUE(p.is_valid());
}

// By default (fence_batch 4) the fence comes first once the pending blocks could cover four
// requests of the size asked; below that a free block that fits is taken without a fence.
TEST_F(arena_fixture, by_default_pending_blocks_are_fenced_first_once_they_could_serve_four) {
  pool p(up, fe, arena_options());
  ASSERT_EQ(p.options().fence_batch, 4u);
  const auto [a, b, g, c, h] = pending_beside_free_block(p);
  const std::uint64_t fences = p.stats().fences;
  // 8 MiB pending could serve 2.5 MiB three times, not four: C (free) serves it, no fence.
  const std::uintptr_t x = p.allocate(5 * k_mib / 2).address;
  EXPECT_EQ(x, c);
  EXPECT_EQ(p.stats().fences, fences);
  EXPECT_EQ(p.stats().pending_bytes, 8 * k_mib);
  // They could serve 2 MiB four times: fence first, and A+B (8 MiB, the best fit once free)
  // serve it rather than C's remaining 9.5 MiB.
  EXPECT_EQ(p.allocate(2 * k_mib).address, a);
  EXPECT_EQ(p.stats().fences, fences + 1);
  EXPECT_EQ(p.stats().pending_bytes, 0u);
  for (std::uintptr_t y : {x, g, h})
    ASSERT_EQ(p.deallocate(y), pool_status::ok);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(arena_fixture, small_requests_keep_their_segments_and_big_ones_have_none_of_their_own) {
  pool p(up, fe, arena_options());
  const std::uintptr_t s = p.allocate(4096).address;
  EXPECT_LT(s, fake_upstream::k_arena_base);                  // a small segment
  const std::uintptr_t big = p.allocate(300 * k_mib).address; // oversize without an arena
  EXPECT_GE(big, fake_upstream::k_arena_base);
  ASSERT_EQ(p.deallocate(big), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  // The 300 MiB block splits for smaller requests, unlike an oversize segment.
  const std::uintptr_t x = p.allocate(100 * k_mib).address;
  EXPECT_EQ(x, big);
  EXPECT_EQ(p.allocate(150 * k_mib).address, big + 100 * k_mib);
  EXPECT_EQ(p.stats().reserved_bytes, 300 * k_mib + p.options().small_segment_bytes);
}

TEST_F(arena_fixture, trim_unmaps_whole_free_pages_and_cuts_the_segment) {
  pool p(up, fe, arena_options(), &mirror);
  std::uintptr_t x[4];
  for (auto& a : x)
    a = p.allocate(8 * k_mib).address; // 4 growths of 4 pages, one segment
  ASSERT_EQ(arena_segments(p), 1u);
  ASSERT_EQ(p.deallocate(x[1]), pool_status::ok);
  ASSERT_EQ(p.deallocate(x[3]), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  // x[1]'s pages are interior: the segment is cut in two; x[3]'s are the tail.
  EXPECT_EQ(p.trim(), 16 * k_mib);
  EXPECT_EQ(p.stats().reserved_bytes, 16 * k_mib);
  EXPECT_EQ(up.mapped_bytes, 16 * k_mib);
  EXPECT_EQ(arena_segments(p), 2u);
  EXPECT_EQ(up.arena_runs(), 2u);
  EXPECT_TRUE(mirror.matches(p)); // the observer heard the cut
  EXPECT_FALSE(up.arena_covers(x[1], 8 * k_mib));
  EXPECT_FALSE(p.owns(x[1]));
  // The live blocks are intact and findable.
  for (std::uintptr_t a : {x[0], x[2]}) {
    auto info = p.find(a + 12345);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->address, a);
  }
  // The arena grows at its tip again: x[2]'s segment, where x[3]'s pages were.
  EXPECT_EQ(p.allocate(8 * k_mib).address, x[3]);
  for (std::uintptr_t a : {x[0], x[2], x[3]})
    ASSERT_EQ(p.deallocate(a), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  p.trim();
  EXPECT_EQ(p.stats().reserved_bytes, 0u);
  EXPECT_EQ(p.stats().segments, 0u);
  EXPECT_EQ(up.mapped_bytes, 0u);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_TRUE(p.is_valid());
  EXPECT_TRUE(mirror.matches(p));
}

TEST_F(arena_fixture, trim_keeps_the_partial_pages_of_a_free_block) {
  pool p(up, fe, arena_options());
  const std::uintptr_t a = p.allocate(3 * k_mib).address;
  const std::uintptr_t b = p.allocate(6 * k_mib).address; // [3, 9) MiB
  const std::uintptr_t c = p.allocate(3 * k_mib).address; // [9, 12) MiB
  ASSERT_EQ(p.deallocate(b), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  // Pages [4, 6) and [6, 8) lie wholly inside b; [2, 4) and [8, 10) are shared with a and c.
  EXPECT_EQ(p.trim(), 4 * k_mib);
  EXPECT_TRUE(up.arena_covers(a, 4 * k_mib));
  EXPECT_TRUE(up.arena_covers(c - k_mib, 4 * k_mib));
  // What is left of b: 1 MiB on each side of the hole.
  EXPECT_EQ(p.stats().free_bytes, 2 * k_mib);
  EXPECT_EQ(p.stats().largest_free_block, k_mib);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(arena_fixture, growth_placed_elsewhere_starts_a_segment_and_joins_when_the_gap_fills) {
  pool p(up, fe, arena_options(), &mirror);
  const std::uintptr_t a = p.allocate(k_page).address;
  up.place_next = a + 2 * k_page; // another thread's growth took the pages after a
  const std::uintptr_t b = p.allocate(k_page).address;
  EXPECT_EQ(b, a + 2 * k_page);
  EXPECT_EQ(arena_segments(p), 2u);
  up.place_next = a + k_page; // the gap is mapped: three pages, one segment
  const std::uintptr_t c = p.allocate(k_page).address;
  EXPECT_EQ(c, a + k_page);
  EXPECT_EQ(arena_segments(p), 1u);
  EXPECT_EQ(p.stats().segments, 1u);
  EXPECT_TRUE(mirror.matches(p)); // extended, then joined: one segment heard
  for (std::uintptr_t x : {a, b, c})
    ASSERT_EQ(p.deallocate(x), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  EXPECT_EQ(p.stats().largest_free_block, 3 * k_page);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(arena_fixture, the_limit_trims_free_pages_before_growing) {
  pool_options o = arena_options();
  o.limit_bytes = 32 * k_mib;
  pool p(up, fe, o);
  std::uintptr_t x[4];
  for (auto& a : x)
    a = p.allocate(8 * k_mib).address;
  EXPECT_EQ(p.allocate(2 * k_mib).status, pool_status::out_of_memory);
  ASSERT_EQ(p.deallocate(x[0]), pool_status::ok);
  ASSERT_EQ(p.deallocate(x[2]), pool_status::ok);
  // 16 MiB are free but in two pieces: 12 MiB needs their pages back (fence, trim, grow).
  const alloc_result r = p.allocate(12 * k_mib);
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_LE(p.stats().reserved_bytes, 32 * k_mib);
  EXPECT_LE(up.peak_mapped_bytes, 32 * k_mib);
  EXPECT_TRUE(up.arena_covers(r.address, 12 * k_mib));
  EXPECT_TRUE(p.is_valid());
}

TEST_F(arena_fixture, out_of_memory_trims_and_retries) {
  up.set_capacity(24 * k_mib);
  pool p(up, fe, arena_options());
  const std::uintptr_t a = p.allocate(10 * k_mib).address;
  const std::uintptr_t b = p.allocate(10 * k_mib).address;
  ASSERT_NE(b, 0u);
  ASSERT_EQ(p.deallocate(a), pool_status::ok); // pending: no fence yet
  // 12 MiB: the tip has 0 free; a's 10 MiB are pending. Fence, then grow fails (capacity),
  // trim unmaps a's pages, and the retry maps 12 MiB.
  const alloc_result r = p.allocate(12 * k_mib);
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_LE(up.peak_mapped_bytes, 24 * k_mib);
  EXPECT_EQ(p.stats().ooms, 0u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(arena_fixture, cache_cap_gives_free_pages_back) {
  pool_options o = arena_options();
  o.max_cached_bytes = 4 * k_mib;
  pool p(up, fe, o);
  const std::uintptr_t a = p.allocate(16 * k_mib).address;
  ASSERT_EQ(p.deallocate(a, 1), pool_status::ok); // stream-free: not yet free for all
  fe.complete_all();
  p.stream_synchronized(1);
  EXPECT_LE(p.stats().free_bytes, 4 * k_mib);
  EXPECT_LE(up.mapped_bytes, 4 * k_mib);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(arena_fixture, warm_up_maps_the_arena) {
  pool_options o = arena_options();
  o.warmup_bytes = 21 * k_mib;
  pool p(up, fe, o);
  // One small segment (2 MiB) and the rest, 19 MiB, rounded up to pages: 20 MiB of arena.
  EXPECT_EQ(p.stats().reserved_bytes, 22 * k_mib);
  const std::size_t maps = up.maps;
  EXPECT_GE(p.allocate(20 * k_mib).address, fake_upstream::k_arena_base);
  EXPECT_EQ(up.maps, maps);
}

TEST_F(arena_fixture, no_arena_without_upstream_support) {
  up.page = 0;
  pool p(up, fe, arena_options());
  const std::uintptr_t a = p.allocate(300 * k_mib).address; // an oversize segment, as before
  EXPECT_LT(a, fake_upstream::k_arena_base);
  EXPECT_EQ(up.extends, 0u);
}

TEST_F(arena_fixture, threads_growing_at_once_keep_the_structures_whole) {
  pool p(up, fe, arena_options());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::uintptr_t> mine;
      for (int i = 0; i < 200; ++i) {
        const std::size_t n = (std::size_t{1} + static_cast<std::size_t>((i * 7 + t) % 9)) << 20;
        const alloc_result r = p.allocate(n, static_cast<stream_handle>(t));
        ASSERT_EQ(r.status, pool_status::ok);
        mine.push_back(r.address);
        if (i % 3 == 2) {
          ASSERT_EQ(p.deallocate(mine.front(), static_cast<stream_handle>(t)), pool_status::ok);
          mine.erase(mine.begin());
        }
        if (i % 50 == 49) p.trim();
      }
      for (std::uintptr_t a : mine)
        ASSERT_EQ(p.deallocate(a, static_cast<stream_handle>(t)), pool_status::ok);
    });
  for (auto& th : threads)
    th.join();
  EXPECT_TRUE(p.is_valid());
  EXPECT_EQ(p.stats().live_bytes, 0u);
  EXPECT_EQ(p.stats().segments, up.mapped.size() + up.arena_runs());
  EXPECT_EQ(up.bad_unmaps + up.bad_extends, 0u);
}

} // namespace
} // namespace gmem::testing
