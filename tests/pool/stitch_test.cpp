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

  // Its free dissolves the range: the pages are the arena's again (pending until a fence).
  EXPECT_EQ(p.deallocate(r.address), pool_status::ok);
  EXPECT_EQ(up.live_ranges(), 0u);
  EXPECT_EQ(up.unstitch_calls, 1u);
  EXPECT_EQ(obs.unstitches, 1u);
  EXPECT_EQ(obs.unstitch_bytes, 8 * k_mib);
  st = p.stats();
  EXPECT_EQ(st.stitched_ranges, 0u);
  EXPECT_EQ(st.stitched_bytes, 0u);
  EXPECT_EQ(st.pending_bytes, 8 * k_mib);
  EXPECT_EQ(st.live_bytes, 8 * k_mib);
  EXPECT_FALSE(p.owns(r.address));
  EXPECT_EQ(p.deallocate(r.address), pool_status::not_owned);
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
  EXPECT_EQ(p.trim(), 8 * k_mib);
  EXPECT_FALSE(up.arena_covers(l.a, k_page));
  EXPECT_FALSE(up.arena_covers(l.c, k_page));
  EXPECT_EQ(up.bad_unmaps, 0u);
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

// Threads stitching, freeing and trimming at once (a stitch is made without the lock): no
// page is lent to two ranges, the structures stay valid, and everything is given back.
TEST_F(stitch_fixture, threads_stitch_free_and_trim_at_once) {
  {
    pool_options o = stitch_options();
    o.thread_caches = true;
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
    EXPECT_GT(p.stats().stitches, 0u);
    EXPECT_EQ(p.stats().stitched_ranges, 0u);
    EXPECT_EQ(up.bad_stitches, 0u);
  }
  EXPECT_EQ(up.live_ranges(), 0u);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_EQ(up.mapped_now(), 0u);
}

} // namespace
} // namespace gmem::testing
