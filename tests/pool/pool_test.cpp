// The pool's allocation policy: rounding, alignment, segment classes, best fit, splitting and
// coalescing inside a segment (never across), range queries, trim, limit, cache cap, warm-up,
// abandon, stats and reports.
#include "pool/pool.h"
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

namespace gmem::testing {
namespace {

struct pool_test : ::testing::Test {
  pool_options opts() {
    pool_options o;
    o.grow_slack = -1; // keep idle segments unless a test asks otherwise
    return o;
  }
  fake_upstream up;
  fake_fences fe;
  recording_observer obs;
};

TEST_F(pool_test, rounds_to_512_and_aligns) {
  pool p(up, fe, opts(), &obs);
  for (std::size_t bytes : {1u, 255u, 256u, 511u, 512u, 513u, 1000u, 4097u}) {
    alloc_result r = p.allocate(bytes, 1);
    ASSERT_EQ(r.status, pool_status::ok);
    EXPECT_EQ(r.size, (bytes + 511) / 512 * 512) << bytes;
    EXPECT_EQ(r.address % 512, 0u);
    auto info = p.find(r.address);
    ASSERT_TRUE(info);
    EXPECT_EQ(info->requested, bytes);
  }
  alloc_result zero = p.allocate(0, 1);
  EXPECT_EQ(zero.status, pool_status::ok);
  EXPECT_EQ(zero.size, 512u);
  EXPECT_TRUE(p.is_valid());
}

// The oversize threshold grows with the pool (reserved / 512): in a 16 GiB pool a 30 MiB
// request is ordinary and shares a large segment; with a fixed threshold it gets its own.
TEST_F(pool_test, oversize_threshold_grows_with_the_pool) {
  for (double fraction : {1.0 / 512, 0.0}) {
    fake_upstream u;
    pool_options o = opts();
    o.oversize_fraction = fraction;
    o.warmup_bytes = std::size_t{16} << 30; // one small segment and one large one
    pool p(u, fe, o);
    ASSERT_EQ(u.mapped.size(), 2u);
    // Fill the warm-up's large segment, so the next request needs a new segment.
    ASSERT_EQ(p.allocate(o.warmup_bytes - o.small_segment_bytes).status, pool_status::ok);
    alloc_result r = p.allocate(30 * k_mib);
    ASSERT_EQ(r.status, pool_status::ok);
    auto b = p.find(r.address);
    ASSERT_TRUE(b);
    EXPECT_EQ(u.mapped.size(), 3u);
    if (fraction != 0) // a large segment, sized with the pool (reserved / 8, at most 256 MiB)
      EXPECT_EQ(b->segment_size, o.large_segment_max_bytes);
    else // a segment of its own
      EXPECT_EQ(b->segment_size, 30 * k_mib);
    EXPECT_TRUE(p.is_valid());
  }
}

TEST_F(pool_test, small_large_and_oversize_use_their_own_segments) {
  pool_options o = opts();
  pool p(up, fe, o, &obs);
  alloc_result small = p.allocate(4096, 1);
  alloc_result large = p.allocate(3 * k_mib, 1);
  alloc_result huge = p.allocate(45 * k_mib + 5, 1); // more than the large segment has left
  ASSERT_EQ(up.mapped.size(), 3u);
  auto s = p.find(small.address), l = p.find(large.address), h = p.find(huge.address);
  ASSERT_TRUE(s && l && h);
  EXPECT_EQ(s->segment_size, o.small_segment_bytes);
  EXPECT_EQ(l->segment_size, o.large_segment_bytes);
  EXPECT_EQ(h->segment_size, 46 * k_mib); // rounded to the 2 MiB granule
  // A second small request packs into the small segment; a large one into the large one.
  auto s2 = p.find(p.allocate(8192, 1).address);
  auto l2 = p.find(p.allocate(2 * k_mib, 1).address);
  EXPECT_EQ(s2->segment_base, s->segment_base);
  EXPECT_EQ(l2->segment_base, l->segment_base);
  EXPECT_EQ(up.mapped.size(), 3u);
  EXPECT_EQ(obs.maps, 3u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, best_fit_prefers_the_smallest_hole) {
  pool p(up, fe, opts());
  // Carve holes of 4 KiB and 16 KiB in one small segment, separated by live blocks.
  auto a = p.allocate(16384, 1), sep1 = p.allocate(512, 1), b = p.allocate(4096, 1),
       sep2 = p.allocate(512, 1);
  (void)sep1;
  (void)sep2;
  p.deallocate(a.address, 1);
  p.deallocate(b.address, 1);
  EXPECT_EQ(p.allocate(4096, 1).address, b.address);
  EXPECT_EQ(p.allocate(16384, 1).address, a.address);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, splits_and_coalesces_inside_a_segment_only) {
  pool_options o = opts();
  o.reuse_safety = false; // frees are free at once: this test is about address arithmetic
  pool p(up, fe, o);
  // Two small segments back to back: fill the first exactly, then one block in the second.
  auto x = p.allocate(o.small_segment_bytes / 2, 1);
  auto y = p.allocate(o.small_segment_bytes / 2, 1);
  auto z = p.allocate(o.small_segment_bytes / 2, 1);
  ASSERT_EQ(up.mapped.size(), 2u);
  EXPECT_EQ(y.address + y.size, z.address); // the fake places segments back to back
  EXPECT_NE(p.find(y.address)->segment_base, p.find(z.address)->segment_base);
  p.deallocate(y.address);
  p.deallocate(z.address);
  EXPECT_TRUE(p.is_valid());
  // y and z touch but lie in different segments: they must not have merged.
  pool_stats s = p.stats();
  EXPECT_EQ(s.largest_free_block, o.small_segment_bytes);
  EXPECT_EQ(s.free_bytes, o.small_segment_bytes + o.small_segment_bytes / 2);
  EXPECT_GT(s.fragmentation(), 0.0);
  // Within a segment they do merge: x and y become the whole first segment.
  p.deallocate(x.address);
  s = p.stats();
  EXPECT_EQ(s.free_bytes, 2 * o.small_segment_bytes);
  EXPECT_EQ(s.largest_free_block, o.small_segment_bytes);
  std::size_t segments = 0;
  p.for_each_segment([&](const segment_view& v) {
    ++segments;
    ASSERT_EQ(v.blocks.size(), 1u);
    EXPECT_EQ(v.blocks[0].size, v.size);
    EXPECT_EQ(v.blocks[0].state, block_state::free);
  });
  EXPECT_EQ(segments, 2u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, small_remainders_of_large_blocks_stay_attached) {
  pool_options o = opts();
  o.oversize_bytes = o.large_segment_bytes;
  pool p(up, fe, o);
  auto r = p.allocate(o.large_segment_bytes - k_mib / 2, 1);
  EXPECT_EQ(r.size, o.large_segment_bytes); // a 512 KiB sliver is not worth a block
  auto r2 = p.allocate(o.large_segment_bytes - 3 * k_mib, 1);
  EXPECT_EQ(r2.size, o.large_segment_bytes - 3 * k_mib);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, deallocate_reports_not_owned_and_invalid) {
  pool p(up, fe, opts());
  auto r = p.allocate(4096, 1);
  EXPECT_EQ(p.deallocate(12345), pool_status::not_owned);
  EXPECT_EQ(p.deallocate(0), pool_status::not_owned); // 0 is no block, on no path
  EXPECT_EQ(p.deallocate(0, 1), pool_status::not_owned);
  EXPECT_FALSE(p.find(0).has_value());
  EXPECT_EQ(p.deallocate(r.address + 512, 1), pool_status::invalid); // interior pointer
  EXPECT_EQ(p.deallocate(r.address, 1), pool_status::ok);
  EXPECT_EQ(p.deallocate(r.address, 1), pool_status::invalid); // double free
  EXPECT_EQ(p.stats().invalid_frees, 2u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, find_and_owns_describe_blocks_not_segments) {
  pool p(up, fe, opts());
  auto a = p.allocate(4096, 1), b = p.allocate(10000, 7);
  auto info = p.find(b.address + 9999);
  ASSERT_TRUE(info);
  EXPECT_EQ(info->address, b.address);
  EXPECT_EQ(info->size, b.size);
  EXPECT_EQ(info->requested, 10000u);
  EXPECT_EQ(info->stream, 7u);
  EXPECT_EQ(p.find(a.address + 4095)->address, a.address);
  EXPECT_FALSE(p.find(b.address + b.size)); // free space after b
  EXPECT_TRUE(p.owns(b.address + b.size));
  EXPECT_FALSE(p.owns(1));
  auto seg = p.find(a.address)->segment_base;
  EXPECT_FALSE(p.owns(seg + p.find(a.address)->segment_size));
  p.deallocate(a.address, 1);
  EXPECT_FALSE(p.find(a.address));
}

TEST_F(pool_test, trim_releases_whole_free_segments) {
  pool_options o = opts();
  o.reuse_safety = false;
  pool p(up, fe, o, &obs);
  auto a = p.allocate(4096), b = p.allocate(3 * k_mib), c = p.allocate(64 * k_mib);
  p.deallocate(b.address);
  p.deallocate(c.address);
  EXPECT_EQ(p.trim(64 * k_mib), o.large_segment_bytes); // keeps 64 MiB cached
  EXPECT_EQ(p.trim(), 64 * k_mib);
  EXPECT_EQ(up.mapped.size(), 1u); // the small segment holds a live block
  pool_stats s = p.stats();
  EXPECT_EQ(s.trims, 2u);
  EXPECT_EQ(s.trimmed_bytes, o.large_segment_bytes + 64 * k_mib);
  EXPECT_EQ(s.reserved_bytes, o.small_segment_bytes);
  EXPECT_EQ(obs.trimmed, o.large_segment_bytes + 64 * k_mib);
  EXPECT_EQ(obs.unmaps, 2u);
  p.deallocate(a.address);
  p.trim();
  EXPECT_EQ(up.mapped.size(), 0u);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, limit_is_never_exceeded) {
  pool_options o = opts();
  o.reuse_safety = false;
  o.limit_bytes = 50 * k_mib;
  pool p(up, fe, o, &obs);
  std::vector<std::uintptr_t> live;
  for (;;) {
    auto r = p.allocate(3 * k_mib, 1);
    if (r.status != pool_status::ok) break;
    live.push_back(r.address);
    ASSERT_LE(up.mapped_now(), o.limit_bytes);
  }
  EXPECT_GE(live.size(), 14u); // a 40 MiB segment, then tight ones within 50 MiB
  EXPECT_EQ(obs.ooms, 1u);
  EXPECT_EQ(obs.last_oom, 3 * k_mib);
  EXPECT_EQ(p.stats().ooms, 1u);
  // Lowering the limit trims what it can; raising it lets the pool grow again.
  for (auto a : live)
    p.deallocate(a, 1);
  p.set_limit(4 * k_mib);
  EXPECT_EQ(up.mapped_now(), 0u);
  EXPECT_EQ(p.allocate(8 * k_mib, 1).status, pool_status::out_of_memory);
  EXPECT_EQ(p.allocate(4 * k_mib, 1).status, pool_status::ok);
  p.set_limit(0);
  EXPECT_EQ(p.allocate(100 * k_mib, 1).status, pool_status::ok);
  EXPECT_EQ(p.stats().limit_bytes, 0u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, limit_trims_idle_segments_to_make_room) {
  pool_options o = opts();
  o.reuse_safety = false;
  o.limit_bytes = 50 * k_mib;
  pool p(up, fe, o, &obs);
  auto a = p.allocate(40 * k_mib);
  ASSERT_EQ(a.status, pool_status::ok);
  p.deallocate(a.address);
  // 45 MiB does not fit next to the idle 40 MiB segment under the limit: trim, then map.
  auto b = p.allocate(45 * k_mib);
  ASSERT_EQ(b.status, pool_status::ok);
  EXPECT_EQ(p.stats().trims, 1u);
  EXPECT_LE(up.peak_mapped_bytes, o.limit_bytes);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, segments_shrunk_to_the_limit_keep_serving_their_class) {
  pool_options o = opts();
  o.reuse_safety = false;
  o.limit_bytes = 24 * k_mib; // below the 40 MiB large segment
  pool p(up, fe, o);
  for (int round = 0; round < 4; ++round) {
    auto a = p.allocate(7 * k_mib), b = p.allocate(8 * k_mib);
    ASSERT_EQ(a.status, pool_status::ok);
    ASSERT_EQ(b.status, pool_status::ok);
    p.deallocate(a.address);
    p.deallocate(b.address);
  }
  EXPECT_EQ(up.maps, 2u); // two shrunk large segments (8 MiB each), reused every round
  EXPECT_EQ(p.stats().trims, 0u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, driver_oom_trims_and_retries) {
  pool_options o = opts();
  o.reuse_safety = false;
  up.set_capacity(64 * k_mib);
  pool p(up, fe, o, &obs);
  auto a = p.allocate(40 * k_mib);
  ASSERT_EQ(a.status, pool_status::ok);
  p.deallocate(a.address);
  // 50 MiB does not fit next to the idle 40 MiB segment: the pool trims it and retries.
  auto b = p.allocate(50 * k_mib);
  ASSERT_EQ(b.status, pool_status::ok);
  EXPECT_EQ(p.stats().trims, 1u);
  EXPECT_EQ(p.allocate(30 * k_mib).status, pool_status::out_of_memory);
  EXPECT_EQ(obs.ooms, 1u);
  EXPECT_TRUE(p.is_valid());
}

// With the growth rule on: the idle segment goes back before the map, which fails (the
// driver is out of memory); the steps after it give it back once, not a second time.
TEST_F(pool_test, failed_growth_gives_idle_segments_back_once) {
  pool_options o = opts();
  o.reuse_safety = false;
  o.grow_slack = 0.05;
  pool p(up, fe, o, &obs);
  auto a = p.allocate(10 * k_mib); // a 40 MiB large segment
  ASSERT_EQ(a.status, pool_status::ok);
  p.deallocate(a.address); // free at once (reuse_safety off): the segment is idle
  up.fail_next = 1;
  auto b = p.allocate(50 * k_mib); // oversize: the idle segment goes, the map fails once
  ASSERT_EQ(b.status, pool_status::ok);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_EQ(obs.unmaps, 1u);
  EXPECT_EQ(up.mapped_bytes, p.stats().reserved_bytes);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, cache_cap_trims_idle_segments) {
  pool_options o = opts();
  o.reuse_safety = false;
  o.max_cached_bytes = 30 * k_mib;
  o.oversize_bytes = 20 * k_mib; // 24 MiB: an oversize segment each
  pool p(up, fe, o);
  auto a = p.allocate(24 * k_mib), b = p.allocate(24 * k_mib);
  p.deallocate(a.address);
  EXPECT_EQ(up.mapped.size(), 2u); // 24 MiB cached <= 30 MiB
  p.deallocate(b.address);
  EXPECT_EQ(up.mapped.size(), 1u);
  EXPECT_LE(p.stats().free_bytes, o.max_cached_bytes);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, grow_slack_releases_idle_segments_before_growing) {
  pool_options o = opts();
  o.reuse_safety = false;
  o.grow_slack = 0.125;
  pool p(up, fe, o);
  auto a = p.allocate(40 * k_mib);
  p.deallocate(a.address);
  auto b = p.allocate(60 * k_mib); // the idle 40 MiB cannot serve it and is released
  ASSERT_EQ(b.status, pool_status::ok);
  EXPECT_EQ(p.stats().reserved_bytes, 60 * k_mib);
  EXPECT_TRUE(p.is_valid());
}

// A training step: a peak of ten 100 MiB oversize blocks, then at the low point a 30 MiB
// one that no idle segment fits. The growth rule measures demand against the recent peak
// of live bytes (grow_window_allocs), so the 30 MiB segment fits in the slack next to the
// idle step segments: after the first step nothing is mapped or unmapped. Judged by the
// current demand alone (grow_window_allocs = 0, the old rule) every step unmaps all ten
// and maps eleven.
TEST_F(pool_test, growth_hysteresis_keeps_a_steps_segments_across_its_low_point) {
  for (std::size_t window : {std::size_t{16384}, std::size_t{0}}) {
    fake_upstream u;
    pool_options o;
    o.reuse_safety = false;
    o.grow_window_allocs = window;
    pool p(u, fe, o);
    std::size_t maps_after_first = 0, unmaps_after_first = 0;
    for (int step = 0; step < 5; ++step) {
      std::vector<std::uintptr_t> acts;
      for (int i = 0; i < 10; ++i) {
        auto r = p.allocate(100 * k_mib);
        ASSERT_EQ(r.status, pool_status::ok);
        acts.push_back(r.address);
      }
      for (std::uintptr_t a : acts)
        p.deallocate(a);
      auto low = p.allocate(30 * k_mib);
      ASSERT_EQ(low.status, pool_status::ok);
      p.deallocate(low.address);
      if (step == 0) {
        maps_after_first = u.maps;
        unmaps_after_first = u.unmaps;
      }
      EXPECT_TRUE(p.is_valid());
    }
    if (window != 0) {
      EXPECT_EQ(u.maps, maps_after_first);
      EXPECT_EQ(u.unmaps, unmaps_after_first);
      // Peak reserved stays within the slack of the step's peak: 1000 + 30 MiB.
      EXPECT_LE(p.stats().peak_reserved_bytes, 1030 * k_mib);
    } else {
      EXPECT_GE(u.maps - maps_after_first, 4u * 11u); // the old rule churns every step
    }
  }
}

// Large segments grow with the pool: an eighth of the reserved bytes, at least
// large_segment_bytes and at most large_segment_max_bytes.
TEST_F(pool_test, large_segments_grow_with_reserved_bytes) {
  pool_options o = opts();
  o.reuse_safety = false;
  pool p(up, fe, o);
  p.allocate(5 * k_mib);
  EXPECT_EQ(up.mapped_bytes, 40 * k_mib); // small pool: large_segment_bytes
  for (int i = 0; i < 4; ++i)
    p.allocate(100 * k_mib); // oversize: reserved 440 MiB
  p.allocate(19 * k_mib);    // fits the 35 MiB left of the first large segment
  p.allocate(19 * k_mib);    // 16 MiB left: a new large one of 440 / 8 = 55 -> 56 MiB
  EXPECT_EQ(up.mapped_bytes, 440 * k_mib + 56 * k_mib);
  for (int i = 0; i < 40; ++i)
    p.allocate(100 * k_mib); // reserved > 2 GiB
  std::size_t before = up.mapped_bytes;
  p.allocate(19 * k_mib); // the 56 MiB one has 37 MiB left: serves it
  p.allocate(19 * k_mib); // 18 MiB left: a new large segment, capped at 256 MiB
  EXPECT_EQ(up.mapped_bytes - before, 256 * k_mib);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, warmup_maps_at_construction_and_serves_without_mapping) {
  pool_options o = opts();
  o.warmup_bytes = 100 * k_mib;
  pool p(up, fe, o);
  EXPECT_EQ(up.mapped_bytes, 100 * k_mib);
  EXPECT_EQ(up.maps, 2u);
  for (int i = 0; i < 10; ++i)
    p.allocate(4096, 1);
  for (int i = 0; i < 10; ++i)
    p.allocate(5 * k_mib, 1);
  EXPECT_EQ(up.maps, 2u);
  EXPECT_EQ(p.stats().cache_hits, 20u);
  EXPECT_EQ(p.stats().upstream_allocs, 0u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(pool_test, stats_and_peaks) {
  pool_options o = opts();
  pool p(up, fe, o);
  auto a = p.allocate(1000, 1), b = p.allocate(5 * k_mib, 1);
  pool_stats s = p.stats();
  EXPECT_EQ(s.live_bytes, 1024u + 5 * k_mib);
  EXPECT_EQ(s.live_requested_bytes, 1000u + 5 * k_mib);
  EXPECT_EQ(s.live_blocks, 2u);
  EXPECT_EQ(s.total_allocs, 2u);
  EXPECT_EQ(s.upstream_allocs, 2u);
  EXPECT_EQ(s.segments, 2u);
  EXPECT_EQ(s.reserved_bytes, o.small_segment_bytes + o.large_segment_bytes);
  p.deallocate(b.address, 1);
  p.stream_synchronized(1);
  s = p.stats();
  EXPECT_EQ(s.peak_live_bytes, 1024u + 5 * k_mib);
  EXPECT_EQ(s.live_bytes, 1024u);
  EXPECT_EQ(s.total_frees, 1u);
  EXPECT_EQ(s.free_bytes, o.small_segment_bytes + o.large_segment_bytes - 1024u);
  p.reset_peaks();
  EXPECT_EQ(p.stats().peak_live_bytes, 1024u);
  EXPECT_EQ(p.stats().peak_reserved_bytes, o.small_segment_bytes + o.large_segment_bytes);
  (void)a;
}

TEST_F(pool_test, destructor_unmaps_and_abandon_forgets) {
  {
    pool p(up, fe, opts());
    p.allocate(4096, 1);
    p.allocate(64 * k_mib, 1);
  }
  EXPECT_EQ(up.mapped.size(), 0u);
  EXPECT_EQ(up.bad_unmaps, 0u);
  {
    pool p(up, fe, opts());
    auto r = p.allocate(4096, 1);
    p.abandon();
    EXPECT_FALSE(p.owns(r.address));
    EXPECT_EQ(p.deallocate(r.address, 1), pool_status::not_owned);
    EXPECT_EQ(p.stats().reserved_bytes, 0u);
    EXPECT_TRUE(p.is_valid());
  }
  EXPECT_EQ(up.mapped.size(), 1u); // left to the driver's teardown
}

TEST_F(pool_test, segment_report_shows_every_block_state) {
  pool p(up, fe, opts());
  auto live = p.allocate(4096, 3), pending = p.allocate(8192, 3), on_stream = p.allocate(16384, 3);
  p.allocate(512, 3); // keeps the three apart from the free tail
  p.deallocate(pending.address);
  p.deallocate(on_stream.address, 5);
  std::vector<block_view> blocks;
  p.for_each_segment([&](const segment_view& v) {
    EXPECT_EQ(v.kind, segment_kind::small);
    std::size_t sum = 0;
    for (const auto& b : v.blocks)
      sum += b.size;
    EXPECT_EQ(sum, v.size); // the blocks tile the segment
    blocks = v.blocks;
  });
  ASSERT_GE(blocks.size(), 5u);
  EXPECT_EQ(blocks[0].address, live.address);
  EXPECT_EQ(blocks[0].state, block_state::live);
  EXPECT_EQ(blocks[0].requested, 4096u);
  EXPECT_EQ(blocks[0].stream, 3u);
  EXPECT_EQ(blocks[1].state, block_state::pending);
  EXPECT_EQ(blocks[2].state, block_state::stream_free);
  EXPECT_EQ(blocks[2].stream, 5u);
  EXPECT_EQ(blocks.back().state, block_state::free);
  pool_stats s = p.stats();
  EXPECT_EQ(s.pending_bytes, 8192u);
  EXPECT_EQ(s.pending_blocks, 1u);
  EXPECT_EQ(s.stream_free_bytes, 16384u);
}

TEST_F(pool_test, observer_hears_fences_from_the_program) {
  pool p(up, fe, opts(), &obs);
  auto a = p.allocate(4096);
  p.deallocate(a.address);
  p.end_external_fence(p.begin_external_fence());
  EXPECT_EQ(obs.fences, 1u);
  EXPECT_EQ(obs.fence_released, 4096u);
  EXPECT_EQ(p.stats().fences, 1u);
  EXPECT_EQ(p.stats().pending_bytes, 0u);
}

TEST_F(pool_test, stats_list_has_the_agreed_names) {
  pool_stats s;
  std::vector<std::string> names;
#define GMEM_X_NAME(n, d) names.push_back(#n);
  GMEM_POOL_STATS(GMEM_X_NAME)
#undef GMEM_X_NAME
  for (const char* want : {"live_bytes",
                           "live_requested_bytes",
                           "live_blocks",
                           "reserved_bytes",
                           "peak_live_bytes",
                           "peak_reserved_bytes",
                           "total_allocs",
                           "total_frees",
                           "total_alloc_bytes",
                           "cache_hits",
                           "upstream_allocs",
                           "segments",
                           "segment_maps",
                           "segment_unmaps",
                           "pending_bytes",
                           "pending_blocks",
                           "fences",
                           "ooms",
                           "free_bytes",
                           "largest_free_block",
                           "trims",
                           "trimmed_bytes",
                           "limit_bytes"})
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  EXPECT_EQ(s.fragmentation(), 0.0);
  s.free_bytes = 100;
  s.largest_free_block = 25;
  EXPECT_DOUBLE_EQ(s.fragmentation(), 0.75);
}

} // namespace
} // namespace gmem::testing
