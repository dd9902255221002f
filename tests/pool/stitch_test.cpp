// Stitched ranges (pool_options::stitch): a large request that no free block fits is served
// from the arena's scattered free pages mapped into a fresh range, before the arena grows;
// its free gives the pages back with the free's safety; the limit, trim and the views.
#include "pool/pool.h"
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

#include <random>
#include <thread>
#include <vector>

namespace gmem::testing {
namespace {

constexpr std::size_t k_page = 2 * k_mib;

struct stitch_fixture : ::testing::Test {
  stitch_fixture() {
    up.page = k_page;
    up.stitching = true;
  }
  static pool_options stitch_options() {
    pool_options o;
    o.arena = true;
    o.stitch = true;
    o.thread_caches = false; // the tests free on streams and look at the pool itself
    return o;
  }
  // Four 4 MiB blocks side by side at the arena's start; a and c freed without a stream
  // (pending): 8 MiB free in two runs of two pages, none of them 8 MiB long.
  struct layout {
    std::uintptr_t a, b, c, d;
  };
  layout two_free_runs(pool& p) {
    layout l{};
    l.a = p.allocate(4 * k_mib).address;
    l.b = p.allocate(4 * k_mib).address;
    l.c = p.allocate(4 * k_mib).address;
    l.d = p.allocate(4 * k_mib).address;
    EXPECT_EQ(l.a, fake_upstream::k_arena_base);
    EXPECT_EQ(l.b, l.a + 4 * k_mib);
    EXPECT_EQ(l.c, l.b + 4 * k_mib);
    EXPECT_EQ(l.d, l.c + 4 * k_mib);
    EXPECT_EQ(p.deallocate(l.a), pool_status::ok);
    EXPECT_EQ(p.deallocate(l.c), pool_status::ok);
    return l;
  }
  static bool stitched(std::uintptr_t x) {
    return x >= fake_upstream::k_stitch_base && x < fake_upstream::k_arena_base;
  }
  static bool inside(std::uintptr_t x, std::uintptr_t base, std::size_t bytes) {
    return x >= base && x < base + bytes;
  }
  fake_upstream up;
  fake_fences fe;
};

TEST_F(stitch_fixture, serves_a_request_from_scattered_free_pages_without_growing) {
  recording_observer obs;
  pool p(up, fe, stitch_options(), &obs);
  const layout l = two_free_runs(p);
  const std::size_t mapped = up.mapped_now();
  const std::size_t extends = up.extends;
  alloc_result r = p.allocate(8 * k_mib);
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_EQ(r.size, 8 * k_mib);
  EXPECT_TRUE(stitched(r.address));
  // The pages of a, then those of c (runs of equal length in address order), no new memory.
  EXPECT_EQ(up.stitched_pages(r.address),
            (std::vector<std::uintptr_t>{l.a, l.a + k_page, l.c, l.c + k_page}));
  EXPECT_EQ(up.mapped_now(), mapped);
  EXPECT_EQ(up.extends, extends);
  EXPECT_EQ(up.bad_stitches, 0u);
  pool_stats st = p.stats();
  EXPECT_EQ(st.reserved_bytes, 16 * k_mib);
  EXPECT_EQ(st.live_bytes, 16 * k_mib);
  EXPECT_EQ(st.stitches, 1u);
  EXPECT_EQ(st.stitched_ranges, 1u);
  EXPECT_EQ(st.stitched_bytes, 8 * k_mib);
  EXPECT_EQ(st.free_bytes, 0u);
  EXPECT_EQ(obs.stitches, 1u);
  EXPECT_EQ(obs.stitch_bytes, 8 * k_mib);
  EXPECT_EQ(obs.maps, 4u); // the four growths' segment events; the range is no new memory
  EXPECT_TRUE(p.is_valid());
  auto info = p.find(r.address + 5 * k_mib);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->address, r.address);
  EXPECT_EQ(info->segment_base, r.address);
  EXPECT_EQ(info->segment_size, 8 * k_mib);

  // Its free gives the pages back to the arena (pending until a fence); the range stays
  // mapped, kept, serving nothing: the observer hears it end, a second free is refused.
  EXPECT_EQ(p.deallocate(r.address), pool_status::ok);
  EXPECT_EQ(up.live_ranges(), 1u);
  EXPECT_EQ(up.unstitch_calls, 0u);
  EXPECT_EQ(obs.unstitches, 1u);
  EXPECT_EQ(obs.unstitch_bytes, 8 * k_mib);
  st = p.stats();
  EXPECT_EQ(st.stitched_ranges, 0u);
  EXPECT_EQ(st.stitched_bytes, 0u);
  EXPECT_EQ(st.kept_ranges, 1u);
  EXPECT_EQ(st.kept_range_bytes, 8 * k_mib);
  EXPECT_EQ(st.pending_bytes, 8 * k_mib);
  EXPECT_EQ(st.live_bytes, 8 * k_mib);
  EXPECT_TRUE(p.owns(r.address));
  EXPECT_FALSE(p.find(r.address));
  EXPECT_EQ(p.deallocate(r.address), pool_status::invalid);
  EXPECT_TRUE(p.is_valid());
  // After a fence a and c are free again and serve requests in place.
  p.end_external_fence(p.begin_external_fence());
  const std::uintptr_t x = p.allocate(4 * k_mib).address;
  EXPECT_TRUE(x == l.a || x == l.c);
  EXPECT_EQ(up.mapped_now(), mapped);
}

TEST_F(stitch_fixture, without_the_option_the_arena_grows) {
  pool_options o = stitch_options();
  o.stitch = false;
  pool p(up, fe, o);
  two_free_runs(p);
  alloc_result r = p.allocate(8 * k_mib);
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_FALSE(stitched(r.address));
  EXPECT_EQ(up.mapped_now(), 24 * k_mib);
  EXPECT_EQ(up.stitch_calls, 0u);
  EXPECT_EQ(p.stats().stitches, 0u);
}

TEST_F(stitch_fixture, the_last_page_lends_only_what_the_request_needs) {
  pool p(up, fe, stitch_options());
  const layout l = two_free_runs(p);
  alloc_result r = p.allocate(5 * k_mib); // 2 pages of a, 1 MiB of c's first page
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_EQ(up.stitched_pages(r.address), (std::vector<std::uintptr_t>{l.a, l.a + k_page, l.c}));
  // The rest of c stays free in the arena: 1 MiB of the lent page and c's second page.
  std::vector<block_view> arena;
  bool seen_range = false;
  p.for_each_segment([&](const segment_view& v) {
    if (v.stitched) {
      seen_range = true;
      ASSERT_EQ(v.blocks.size(), 1u);
      EXPECT_EQ(v.blocks[0].size, 5 * k_mib);
      EXPECT_EQ(v.blocks[0].state, block_state::live);
    } else if (v.base >= fake_upstream::k_arena_base) {
      arena = v.blocks;
    }
  });
  EXPECT_TRUE(seen_range);
  ASSERT_EQ(arena.size(), 5u);
  EXPECT_TRUE(arena[0].lent); // a, 4 MiB
  EXPECT_EQ(arena[0].size, 4 * k_mib);
  EXPECT_FALSE(arena[1].lent); // b
  EXPECT_TRUE(arena[2].lent);  // the first MiB of c
  EXPECT_EQ(arena[2].address, l.c);
  EXPECT_EQ(arena[2].size, 1 * k_mib);
  EXPECT_EQ(arena[3].state, block_state::free); // the rest of c
  EXPECT_EQ(arena[3].size, 3 * k_mib);
  EXPECT_FALSE(arena[4].lent); // d
  EXPECT_EQ(p.stats().free_bytes, 3 * k_mib);
  EXPECT_EQ(up.mapped_now(), 16 * k_mib);
  EXPECT_TRUE(p.is_valid());
  // The free part of the lent page serves another owner (disjoint offsets of one page).
  alloc_result s = p.allocate(3 * k_mib);
  EXPECT_EQ(s.address, l.c + 1 * k_mib);
  EXPECT_EQ(up.mapped_now(), 16 * k_mib);
  EXPECT_EQ(p.deallocate(r.address), pool_status::ok);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(stitch_fixture, the_arena_grows_by_what_the_free_pages_lack) {
  pool p(up, fe, stitch_options());
  const layout l = two_free_runs(p);
  alloc_result r = p.allocate(12 * k_mib); // 4 free pages, 2 more at the arena's end
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_EQ(up.mapped_now(), 20 * k_mib); // growing for the whole request: 28 MiB
  EXPECT_EQ(up.stitched_pages(r.address),
            (std::vector<std::uintptr_t>{l.a, l.a + k_page, l.c, l.c + k_page, l.d + 4 * k_mib,
                                         l.d + 4 * k_mib + k_page}));
  EXPECT_EQ(p.stats().stitched_bytes, 12 * k_mib);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(stitch_fixture, a_failed_stitch_gives_the_pages_back_and_grows) {
  pool p(up, fe, stitch_options());
  two_free_runs(p);
  up.stitch_fail_next = 1;
  alloc_result r = p.allocate(8 * k_mib);
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_FALSE(stitched(r.address));
  EXPECT_EQ(p.stats().free_bytes, 8 * k_mib); // a and c, free again
  EXPECT_EQ(p.stats().stitches, 0u);
  EXPECT_TRUE(p.is_valid());
}

// Reuse safety: a stitched block freed without a stream puts its pages back pending; no
// allocation gets them until a fence (here fences fail, so none does).
TEST_F(stitch_fixture, pages_of_a_streamless_free_wait_for_a_fence) {
  pool p(up, fe, stitch_options());
  const layout l = two_free_runs(p);
  alloc_result r = p.allocate(8 * k_mib);
  ASSERT_TRUE(stitched(r.address));
  EXPECT_EQ(p.deallocate(r.address), pool_status::ok);
  fe.sync_ok = false;
  fe.barrier_ok = false;
  for (int i = 0; i < 4; ++i) {
    alloc_result x = p.allocate(4 * k_mib);
    ASSERT_EQ(x.status, pool_status::ok);
    EXPECT_FALSE(inside(x.address, l.a, 4 * k_mib)) << i;
    EXPECT_FALSE(inside(x.address, l.c, 4 * k_mib)) << i;
  }
  EXPECT_EQ(p.stats().pending_bytes, 8 * k_mib);
  EXPECT_TRUE(p.is_valid());
}

// A stitched block freed on stream 1: its pages are stream-free on 1. Stream 2 gets them
// only through an event recorded on 1 after the free (here no event can be recorded and no
// fence made, so it never does); stream 1 reuses them at once.
TEST_F(stitch_fixture, pages_of_a_stream_free_stay_with_their_stream) {
  pool p(up, fe, stitch_options());
  const layout l = two_free_runs(p);
  const stream_handle s1 = 1, s2 = 2;
  alloc_result r = p.allocate(8 * k_mib, s1);
  ASSERT_TRUE(stitched(r.address));
  EXPECT_EQ(p.deallocate(r.address, s1), pool_status::ok);
  EXPECT_EQ(p.stats().stream_free_bytes, 8 * k_mib);
  fe.sync_ok = false;
  fe.barrier_ok = false;
  fe.record_ok = false;
  for (int i = 0; i < 2; ++i) {
    alloc_result x = p.allocate(4 * k_mib, s2);
    ASSERT_EQ(x.status, pool_status::ok);
    EXPECT_FALSE(inside(x.address, l.a, 4 * k_mib)) << i;
    EXPECT_FALSE(inside(x.address, l.c, 4 * k_mib)) << i;
  }
  alloc_result own = p.allocate(4 * k_mib, s1);
  EXPECT_TRUE(inside(own.address, l.a, 4 * k_mib) || inside(own.address, l.c, 4 * k_mib));
  EXPECT_TRUE(p.is_valid());
}

// Ten 2 MiB blocks side by side; the even ones freed without a stream: five free pages, no
// two of them touching.
std::vector<std::uintptr_t> scattered_pages(pool& p) {
  std::vector<std::uintptr_t> x;
  for (int i = 0; i < 10; ++i)
    x.push_back(p.allocate(k_page).address);
  for (std::size_t i = 0; i < x.size(); i += 2)
    EXPECT_EQ(p.deallocate(x[i]), pool_status::ok);
  return x;
}

// A freed range stays mapped and serves the next request of as many pages with no driver
// call, once its pages are free (pending ones: after the fence the pool makes for it).
TEST_F(stitch_fixture, a_kept_range_serves_again_without_mapping) {
  recording_observer obs;
  pool p(up, fe, stitch_options(), &obs);
  const layout l = two_free_runs(p);
  alloc_result r = p.allocate(8 * k_mib);
  ASSERT_TRUE(stitched(r.address));
  const std::size_t extends = up.extends;
  for (std::size_t bytes : {8 * k_mib, 7 * k_mib, 6 * k_mib + k_mib / 2}) {
    ASSERT_EQ(p.deallocate(r.address), pool_status::ok); // pending: the reuse fences first
    alloc_result again = p.allocate(bytes);
    ASSERT_EQ(again.status, pool_status::ok);
    EXPECT_EQ(again.address, r.address) << bytes;
    EXPECT_TRUE(p.is_valid());
  }
  // 6.5 MiB needs three pages and a quarter of the fourth (c's second): its rest is free in the
  // arena. 5 MiB (three pages) is no reuse: a range serves requests of its own page count.
  const pool_stats st = p.stats();
  EXPECT_EQ(st.stitches, 1u);
  EXPECT_EQ(st.kept_reuses, 3u);
  EXPECT_EQ(st.kept_ranges, 0u);
  EXPECT_EQ(st.stitched_ranges, 1u);
  EXPECT_EQ(st.free_bytes, k_mib + k_mib / 2);
  EXPECT_EQ(up.stitch_calls, 1u);
  EXPECT_EQ(up.unstitch_calls, 0u);
  EXPECT_EQ(up.extends, extends);
  EXPECT_EQ(obs.stitches, 4u); // each time it serves, the trace sees it start and end
  EXPECT_EQ(obs.unstitches, 3u);
  const alloc_result in_arena = p.allocate(k_mib + k_mib / 2); // what the range does not use
  EXPECT_EQ(in_arena.address, l.c + k_page + k_mib / 2);
  ASSERT_EQ(p.deallocate(r.address), pool_status::ok);
  EXPECT_NE(p.allocate(5 * k_mib).address, r.address);
}

// A kept range is unavailable while one of its pages is in use through another address, the
// arena's or another range's: the request is served elsewhere and the range stays kept.
TEST_F(stitch_fixture, a_kept_range_waits_while_the_arena_uses_its_page) {
  pool p(up, fe, stitch_options());
  const layout l = two_free_runs(p);
  const alloc_result r = p.allocate(8 * k_mib);
  ASSERT_TRUE(stitched(r.address));
  ASSERT_EQ(p.deallocate(r.address), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  const alloc_result small = p.allocate(4 * k_mib); // through the arena, on a range's pages
  ASSERT_TRUE(small.address == l.a || small.address == l.c);
  const alloc_result big = p.allocate(8 * k_mib);
  ASSERT_EQ(big.status, pool_status::ok);
  EXPECT_NE(big.address, r.address);
  EXPECT_FALSE(inside(big.address, r.address, 8 * k_mib));
  EXPECT_EQ(p.stats().kept_ranges, 1u);
  EXPECT_EQ(p.stats().kept_reuses, 0u);
  EXPECT_TRUE(p.is_valid());
  // big stitched the two free pages of r and two new ones: r's pages are in use through the
  // arena and through big's range. Once small is free again (after a fence), r still waits for big.
  ASSERT_TRUE(stitched(big.address));
  ASSERT_EQ(p.deallocate(small.address), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  const alloc_result x = p.allocate(8 * k_mib);
  EXPECT_NE(x.address, r.address);
  EXPECT_EQ(p.stats().kept_reuses, 0u);
  EXPECT_TRUE(p.is_valid());
}

// Beyond stitch_keep_ranges the least recently used kept range is given back; a reuse makes
// a range recently used; beyond stitch_keep_bytes likewise.
TEST_F(stitch_fixture, kept_ranges_go_least_recently_used_first_beyond_the_budget) {
  pool_options o = stitch_options();
  o.stitch_keep_ranges = 2;
  pool p(up, fe, o);
  scattered_pages(p);
  auto stitch_and_free = [&](std::size_t bytes) {
    const alloc_result r = p.allocate(bytes);
    EXPECT_TRUE(stitched(r.address)) << bytes;
    EXPECT_EQ(p.deallocate(r.address), pool_status::ok);
    p.end_external_fence(p.begin_external_fence());
    return r.address;
  };
  const std::uintptr_t k2 = stitch_and_free(4 * k_mib); // two pages
  const std::uintptr_t k3 = stitch_and_free(6 * k_mib); // three: a new range
  EXPECT_EQ(p.stats().stitches, 2u);
  EXPECT_EQ(stitch_and_free(4 * k_mib), k2); // the smallest that fits; now k3 is the oldest
  const std::uintptr_t k4 = stitch_and_free(8 * k_mib);
  EXPECT_EQ(p.stats().stitches, 3u);
  EXPECT_EQ(p.stats().kept_ranges, 2u);
  EXPECT_EQ(up.unstitch_calls, 1u);
  EXPECT_TRUE(up.stitched_pages(k3).empty()); // given back
  EXPECT_FALSE(up.stitched_pages(k2).empty());
  EXPECT_FALSE(up.stitched_pages(k4).empty());
  EXPECT_FALSE(p.owns(k3));
  EXPECT_TRUE(p.is_valid());
  EXPECT_EQ(up.bad_stitches, 0u);
}

TEST_F(stitch_fixture, kept_ranges_stay_within_their_address_space_budget) {
  pool_options o = stitch_options();
  o.stitch_keep_bytes = 6 * k_mib;
  pool p(up, fe, o);
  scattered_pages(p);
  const alloc_result a = p.allocate(4 * k_mib);
  ASSERT_EQ(p.deallocate(a.address), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  const alloc_result b = p.allocate(6 * k_mib); // 4 + 6 MiB kept would be over: a goes
  ASSERT_TRUE(stitched(b.address));
  ASSERT_EQ(p.deallocate(b.address), pool_status::ok);
  EXPECT_EQ(p.stats().kept_ranges, 1u);
  EXPECT_EQ(p.stats().kept_range_bytes, 6 * k_mib);
  EXPECT_TRUE(up.stitched_pages(a.address).empty());
  EXPECT_TRUE(p.is_valid());
}

// With no range kept, a freed range is given back at once.
TEST_F(stitch_fixture, keeping_none_gives_a_freed_range_back) {
  pool_options o = stitch_options();
  o.stitch_keep_ranges = 0;
  pool p(up, fe, o);
  two_free_runs(p);
  const alloc_result r = p.allocate(8 * k_mib);
  ASSERT_EQ(p.deallocate(r.address), pool_status::ok);
  EXPECT_EQ(up.unstitch_calls, 1u);
  EXPECT_EQ(up.live_ranges(), 0u);
  EXPECT_FALSE(p.owns(r.address));
  EXPECT_EQ(p.deallocate(r.address), pool_status::not_owned);
  EXPECT_TRUE(p.is_valid());
}

// The time budget: once the stitch calls took more than stitch_time_share of the pool's age,
// a request the free pages could serve grows the arena instead; kept ranges still serve.
TEST_F(stitch_fixture, past_the_time_budget_the_arena_grows) {
  pool_options o = stitch_options();
  o.stitch_time_share = 0.01;
  o.stitch_time_floor_ns = 0; // the pool's age alone
  pool p(up, fe, o);
  up.stitch_delay = std::chrono::milliseconds(20); // far above 1% of the pool's age
  scattered_pages(p);
  const alloc_result a = p.allocate(4 * k_mib);
  ASSERT_TRUE(stitched(a.address));
  EXPECT_GE(p.stats().stitch_ns, 20'000'000u);
  const std::size_t extends = up.extends;
  const alloc_result b = p.allocate(4 * k_mib); // three free pages left: the arena grows
  ASSERT_EQ(b.status, pool_status::ok);
  EXPECT_FALSE(stitched(b.address));
  EXPECT_GT(up.extends, extends);
  EXPECT_EQ(p.stats().stitch_budget_grows, 1u);
  EXPECT_EQ(up.stitch_calls, 1u);
  ASSERT_EQ(p.deallocate(a.address), pool_status::ok);
  p.end_external_fence(p.begin_external_fence());
  EXPECT_EQ(p.allocate(4 * k_mib).address, a.address); // a kept range costs nothing
  EXPECT_EQ(up.stitch_calls, 1u);
  EXPECT_TRUE(p.is_valid());
}

// At the limit, stitching serves what growing cannot, with no map or unmap.
TEST_F(stitch_fixture, serves_at_the_limit_without_mapping) {
  pool_options o = stitch_options();
  o.limit_bytes = 16 * k_mib;
  pool p(up, fe, o);
  two_free_runs(p);
  const std::size_t unmaps = up.unmaps, extends = up.extends;
  alloc_result r = p.allocate(8 * k_mib);
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_TRUE(stitched(r.address));
  EXPECT_EQ(up.unmaps, unmaps);
  EXPECT_EQ(up.extends, extends);
  // A request the free pages cannot cover stays within the limit: out of memory.
  EXPECT_EQ(p.allocate(4 * k_mib).status, pool_status::out_of_memory);
  EXPECT_LE(up.peak_mapped_bytes, 16 * k_mib);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_TRUE(p.is_valid());
}

// Trim never gives back a page a live range maps; once the range is freed and fenced, its
// pages go back like any free arena page.
TEST_F(stitch_fixture, trim_spares_lent_pages_and_releases_them_after_the_free) {
  pool p(up, fe, stitch_options());
  const layout l = two_free_runs(p);
  alloc_result r = p.allocate(8 * k_mib);
  ASSERT_TRUE(stitched(r.address));
  EXPECT_EQ(p.trim(), 0u);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_TRUE(up.arena_covers(l.a, 4 * k_mib));
  EXPECT_EQ(p.deallocate(r.address), pool_status::ok);
  EXPECT_EQ(p.trim(), 0u); // pending: not free yet
  p.end_external_fence(p.begin_external_fence());
  EXPECT_EQ(p.trim(), 8 * k_mib); // the kept range on those pages goes first
  EXPECT_FALSE(up.arena_covers(l.a, k_page));
  EXPECT_FALSE(up.arena_covers(l.c, k_page));
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_EQ(up.unstitch_calls, 1u);
  EXPECT_EQ(p.stats().kept_ranges, 0u);
  EXPECT_FALSE(p.owns(r.address));
  EXPECT_EQ(up.mapped_now(), 8 * k_mib);
  EXPECT_TRUE(p.is_valid());
}

// Tearing the pool down gives back the live ranges before the arena's pages.
TEST_F(stitch_fixture, teardown_unstitches_live_ranges_first) {
  {
    pool p(up, fe, stitch_options());
    two_free_runs(p);
    ASSERT_TRUE(stitched(p.allocate(8 * k_mib).address));
  }
  EXPECT_EQ(up.live_ranges(), 0u);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_EQ(up.bad_stitches, 0u);
  EXPECT_EQ(up.mapped_now(), 0u);
}

// Random traffic on several streams with stitching on: the structures stay valid, no page is
// lent twice, and every range is given back.
TEST_F(stitch_fixture, stays_valid_under_random_traffic) {
  std::mt19937 rng(7);
  {
    pool_options o = stitch_options();
    o.thread_caches = true;
    pool p(up, fe, o);
    std::vector<std::pair<std::uintptr_t, stream_handle>> live;
    for (int i = 0; i < 4000; ++i) {
      if (live.size() < 8 || rng() % 2 == 0) {
        const stream_handle s = rng() % 3 == 0 ? k_no_stream : stream_handle{1 + rng() % 2};
        const std::size_t bytes = (1 + rng() % 12) * k_mib + rng() % k_mib;
        alloc_result r = p.allocate(bytes, s);
        ASSERT_EQ(r.status, pool_status::ok);
        live.emplace_back(r.address, s);
      } else {
        const std::size_t k = rng() % live.size();
        ASSERT_EQ(p.deallocate(live[k].first, live[k].second), pool_status::ok);
        live[k] = live.back();
        live.pop_back();
      }
      if (i % 50 == 0) fe.complete_all();
      if (i % 500 == 0) p.end_external_fence(p.begin_external_fence());
      ASSERT_TRUE(p.is_valid()) << "after step " << i;
    }
    EXPECT_GT(p.stats().stitches, 0u);
    EXPECT_EQ(up.bad_stitches, 0u);
  }
  EXPECT_EQ(up.live_ranges(), 0u);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_EQ(up.mapped_now(), 0u);
}

// Four threads stitching, reusing kept ranges, freeing and trimming at once (a stitch is made
// without the lock), with many ranges kept, a few (given back least recently used first), or
// none: no page serves through two addresses, the structures stay valid, and everything is
// given back.
struct stitch_threads : stitch_fixture, ::testing::WithParamInterface<std::size_t> {};

TEST_P(stitch_threads, stitch_reuse_free_and_trim_at_once) {
  {
    pool_options o = stitch_options();
    o.thread_caches = true;
    o.stitch_keep_ranges = GetParam();
    pool p(up, fe, o);
    fe.auto_complete = true;
    up.strict_lending = false; // a range's unstitch may follow its pages' reuse (fakes.h)
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(100 + t);
        std::vector<std::pair<std::uintptr_t, stream_handle>> live;
        for (int i = 0; i < 1500; ++i) {
          if (live.size() < 6 || rng() % 2 == 0) {
            const stream_handle s = rng() % 2 == 0 ? k_no_stream : stream_handle{1 + t};
            alloc_result r = p.allocate((1 + rng() % 10) * k_mib + rng() % k_mib, s);
            if (r.status == pool_status::ok) live.emplace_back(r.address, s);
          } else {
            const std::size_t k = rng() % live.size();
            EXPECT_EQ(p.deallocate(live[k].first, live[k].second), pool_status::ok);
            live[k] = live.back();
            live.pop_back();
          }
          if (t == 0 && i % 200 == 0) p.trim();
          if (t == 1 && i % 300 == 0) p.end_external_fence(p.begin_external_fence());
        }
        for (const auto& [a, s] : live)
          EXPECT_EQ(p.deallocate(a, s), pool_status::ok);
      });
    }
    for (auto& th : threads)
      th.join();
    EXPECT_TRUE(p.is_valid());
    const pool_stats st = p.stats();
    EXPECT_GT(st.stitches, 0u);
    EXPECT_EQ(st.stitched_ranges, 0u);
    EXPECT_LE(st.kept_ranges, GetParam());
    if (GetParam() != 0) {
      EXPECT_GT(st.kept_reuses, 0u);
    }
    EXPECT_EQ(up.bad_stitches, 0u);
  }
  EXPECT_EQ(up.live_ranges(), 0u);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_EQ(up.mapped_now(), 0u);
}

INSTANTIATE_TEST_SUITE_P(kept, stitch_threads, ::testing::Values(256u, 3u, 0u));

} // namespace
} // namespace gmem::testing
