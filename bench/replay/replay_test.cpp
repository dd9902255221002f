#include "bench/replay/alloc_trace.h"
#include "bench/replay/replay_policy.h"
#include "bench/replay/simple_policies.h"
#include "bench/replay/torch_like_policy.h"

#include <gtest/gtest.h>

#include <random>
#include <string>

namespace gmem_bench {
namespace {

constexpr std::size_t k_mib = std::size_t{1} << 20;

TEST(alloc_trace, parses_events_and_peak_live) {
  trace_error err;
  auto t = parse_trace("# header\na 10 100 0\na 20 300\nf 10\nf 99\na 10 50 7\n", err);
  ASSERT_TRUE(t) << err.message;
  EXPECT_EQ(t->allocations, 3u);
  EXPECT_EQ(t->events.size(), 4u);
  EXPECT_EQ(t->skipped_frees, 1u);
  EXPECT_EQ(t->peak_live_bytes, 400u);
  EXPECT_EQ(t->events[3].stream, 7u);
  EXPECT_EQ(t->events[3].id, 2u);
}

TEST(alloc_trace, allocation_at_a_live_address_frees_the_old_block) {
  trace_error err;
  auto t = parse_trace("a 10 100\na 10 200\n", err);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->implicit_frees, 1u);
  EXPECT_EQ(t->peak_live_bytes, 200u);
}

TEST(alloc_trace, reports_the_bad_line) {
  trace_error err;
  EXPECT_FALSE(parse_trace("a 10 100\nx 1\n", err));
  EXPECT_EQ(err.line, 2u);
  EXPECT_FALSE(parse_trace("a zz 100\n", err));
  EXPECT_EQ(err.line, 1u);
  EXPECT_FALSE(parse_trace("a 10 1x\n", err));
}

TEST(torch_like_policy, segment_sizes_follow_pytorch) {
  torch_like_policy p;
  p.allocate(0, 100, 0); // small: 2 MiB segment
  EXPECT_EQ(p.reserved_bytes(), 2 * k_mib);
  p.allocate(1, 12 * k_mib + 1, 0); // >= 10 MiB: rounded to 2 MiB
  EXPECT_EQ(p.reserved_bytes(), 16 * k_mib);
  p.allocate(2, 5 * k_mib, 0); // large < 10 MiB: 20 MiB segment (the 2 MiB rest is too small)
  EXPECT_EQ(p.reserved_bytes(), 36 * k_mib);
  p.allocate(3, 3 * k_mib, 0); // fits in the 15 MiB rest of the 20 MiB segment
  EXPECT_EQ(p.reserved_bytes(), 36 * k_mib);
  EXPECT_TRUE(p.is_valid());
}

TEST(torch_like_policy, reuses_and_merges_freed_blocks) {
  torch_like_policy p;
  p.allocate(0, 4 * k_mib, 0);
  p.allocate(1, 4 * k_mib, 0);
  p.deallocate(0);
  p.deallocate(1);
  EXPECT_TRUE(p.is_valid());
  p.allocate(2, 18 * k_mib, 0); // only fits if the three free pieces merged back to 20 MiB
  EXPECT_EQ(p.reserved_bytes(), 20 * k_mib);
  EXPECT_EQ(p.segments(), 1u);
}

TEST(torch_like_policy, streams_do_not_share_free_blocks) {
  torch_like_policy p;
  p.allocate(0, 4096, 1);
  p.deallocate(0);
  p.allocate(1, 4096, 2);
  EXPECT_EQ(p.reserved_bytes(), 4 * k_mib);
}

TEST(torch_like_policy, stays_valid_under_random_traffic) {
  torch_like_policy p;
  std::mt19937 rng(1);
  std::vector<std::uint32_t> live;
  std::uint32_t next = 0;
  for (int i = 0; i < 5000; ++i) {
    if (live.empty() || rng() % 2) {
      std::size_t bytes = std::size_t{1} << (rng() % 25);
      p.allocate(next, bytes + rng() % 1000, rng() % 2);
      live.push_back(next++);
    } else {
      std::size_t k = rng() % live.size();
      p.deallocate(live[k]);
      live[k] = live.back();
      live.pop_back();
    }
    if (i % 97 == 0) {
      ASSERT_TRUE(p.is_valid()) << "after step " << i;
    }
  }
  EXPECT_TRUE(p.is_valid());
}

TEST(pow2_bins_policy, rounds_to_powers_of_two_and_caches) {
  pow2_bins_policy p;
  p.allocate(0, 3000, 0);
  EXPECT_EQ(p.reserved_bytes(), 4096u);
  p.deallocate(0);
  p.allocate(1, 4000, 0);
  EXPECT_EQ(p.reserved_bytes(), 4096u);
}

TEST(replay, reports_peaks_and_ratio) {
  trace_error err;
  auto t = parse_trace("a 1 1048576\na 2 1048576\nf 1\na 3 1048576\n", err);
  ASSERT_TRUE(t);
  exact_policy p;
  replay_result r = replay(*t, p);
  EXPECT_EQ(r.peak_live_bytes, 2 * k_mib);
  EXPECT_EQ(r.peak_reserved_bytes, 2 * k_mib);
  EXPECT_DOUBLE_EQ(r.ratio(), 1.0);
  EXPECT_EQ(r.failures, 0u);
}

TEST(replay, pool_options_take_numbers_and_counts_take_whole_ones) {
  EXPECT_TRUE(set_gmem_pool_option("fence_batch", "4"));
  EXPECT_FALSE(set_gmem_pool_option("fence_batch", "2.5"));
  EXPECT_FALSE(set_gmem_pool_option("fence_batch", "-1"));
  EXPECT_FALSE(set_gmem_pool_option("fence_batch", "four"));
  EXPECT_FALSE(set_gmem_pool_option("grow_window_allocs", "0.5"));
  EXPECT_TRUE(set_gmem_pool_option("grow_slack", "0.05")); // a fraction where one is meant
  EXPECT_FALSE(set_gmem_pool_option("no_such_option", "1"));
  EXPECT_FALSE(set_gmem_pool_option("arena_page_bytes", "3000000")); // not a power of two
  EXPECT_TRUE(set_gmem_pool_option("stitch", "0"));                  // the default
}

TEST(replay, every_named_policy_replays_a_mixed_trace) {
  std::string text;
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    text +=
        "a " + std::to_string(0x1000 + i) + " " + std::to_string(256 + rng() % (8 << 20)) + "\n";
    if (i >= 50) text += "f " + std::to_string(0x1000 + i - 50 + int(rng() % 10)) + "\n";
  }
  trace_error err;
  auto t = parse_trace(text, err);
  ASSERT_TRUE(t) << err.message;
  for (const std::string& name : policy_names()) {
    auto p = make_policy(name);
    ASSERT_TRUE(p) << name;
    replay_result r = replay(*t, *p, true);
    EXPECT_EQ(r.failures, 0u) << name;
    EXPECT_EQ(r.invalid_after, 0u) << name;
    EXPECT_EQ(r.peak_live_bytes, t->peak_live_bytes) << name;
    EXPECT_GE(r.ratio(), 1.0) << name;
  }
  EXPECT_EQ(make_policy("no-such-policy"), nullptr);
}

#ifdef GMEM_BENCH_WITH_POOL
// A counter of a policy's details() ("name=value ..."); SIZE_MAX when it has none.
std::size_t counter(const replay_policy& p, const std::string& name) {
  const std::string d = " " + p.details();
  const std::size_t at = d.find(" " + name + "=");
  if (at == std::string::npos) return SIZE_MAX;
  return std::stoull(d.substr(at + name.size() + 2));
}

// Four 4 MiB arrays, the first and third freed, then 8 MiB asked twice (freed in between):
// no free range is 8 MiB long, but the four free pages of 2 MiB add up to it.
constexpr const char* k_two_holes = "a 1 4194304\na 2 4194304\na 3 4194304\na 4 4194304\n"
                                    "f 1\nf 3\na 5 8388608\nf 5\na 6 8388608\n";

TEST(gmem_stitch, serves_from_free_pages_with_exact_page_accounting) {
  trace_error err;
  auto t = parse_trace(k_two_holes, err);
  ASSERT_TRUE(t) << err.message;
  auto p = make_policy("gmem-stitch");
  ASSERT_TRUE(p);
  replay_result r = replay(*t, *p, true);
  EXPECT_EQ(r.failures, 0u);
  EXPECT_EQ(r.invalid_after, 0u);
  EXPECT_EQ(r.peak_live_bytes, 16 * k_mib);
  EXPECT_EQ(r.peak_reserved_bytes, 16 * k_mib); // the arrays' 8 pages, nothing more
  EXPECT_DOUBLE_EQ(r.ratio(), 1.0);
  EXPECT_EQ(counter(*p, "arena_page"), 2 * k_mib);
  // The arena: its address space reserved once, 8 pages created and mapped, one access call
  // per growth (4).
  EXPECT_EQ(counter(*p, "vmm_create"), 8u);
  // One stitched range of 4 pages: a reservation, 4 maps and an access call. Freed, it stays
  // mapped (kept), and serves the second request with no call at all.
  EXPECT_EQ(counter(*p, "stitches"), 1u);
  EXPECT_EQ(counter(*p, "kept_reuses"), 1u);
  EXPECT_EQ(counter(*p, "stitched_pages"), 4u);
  EXPECT_EQ(counter(*p, "vmm_reserve"), 1u + 1u);
  EXPECT_EQ(counter(*p, "vmm_map"), 8u + 4u);
  EXPECT_EQ(counter(*p, "vmm_set_access"), 4u + 1u);
  EXPECT_EQ(counter(*p, "vmm_unmap"), 0u);
  EXPECT_EQ(counter(*p, "unstitches"), 0u);
  EXPECT_EQ(counter(*p, "vmm_address_free"), 0u);
  EXPECT_EQ(counter(*p, "vmm_release"), 0u);
  EXPECT_EQ(counter(*p, "stitched_ranges"), 1u);
  EXPECT_EQ(counter(*p, "stitched_bytes"), 8 * k_mib);
  EXPECT_EQ(counter(*p, "reserved_bytes"), 16 * k_mib);
}

TEST(gmem_stitch, the_arena_without_it_grows) {
  trace_error err;
  auto t = parse_trace(k_two_holes, err);
  ASSERT_TRUE(t);
  auto p = make_policy("gmem-arena"); // 16 MiB pages: the arrays share one, 8 MiB grows it
  replay_result r = replay(*t, *p, true);
  EXPECT_EQ(r.invalid_after, 0u);
  EXPECT_EQ(r.peak_reserved_bytes, 32 * k_mib);
  EXPECT_EQ(counter(*p, "stitches"), 0u);
  EXPECT_EQ(counter(*p, "vmm_map"), 2u);
  EXPECT_EQ(counter(*p, "vmm_reserve"), 1u);
}

// The last page of a stitched range lends only what the request needs: 5 MiB over pages of
// 2 MiB maps 3 pages and no new memory, and the rest of the third page stays free.
TEST(gmem_stitch, a_partial_last_page_maps_one_page) {
  trace_error err;
  auto t = parse_trace("a 1 4194304\na 2 4194304\na 3 4194304\na 4 4194304\n"
                       "f 1\nf 3\na 5 5242880\n",
                       err);
  ASSERT_TRUE(t);
  auto p = make_policy("gmem-stitch");
  replay_result r = replay(*t, *p, true);
  EXPECT_EQ(r.invalid_after, 0u);
  EXPECT_EQ(r.peak_reserved_bytes, 16 * k_mib);
  EXPECT_EQ(counter(*p, "stitched_pages"), 3u);
  EXPECT_EQ(counter(*p, "free_bytes"), 3 * k_mib); // 1 MiB of the lent page, c's second page
}

// What the free pages lack is mapped at the arena's end, not the whole request.
TEST(gmem_stitch, grows_only_by_what_the_free_pages_lack) {
  trace_error err;
  auto t = parse_trace("a 1 4194304\na 2 4194304\na 3 4194304\na 4 4194304\n"
                       "f 1\nf 3\na 5 12582912\n",
                       err);
  ASSERT_TRUE(t);
  auto p = make_policy("gmem-stitch");
  replay_result r = replay(*t, *p, true);
  EXPECT_EQ(r.invalid_after, 0u);
  EXPECT_EQ(r.peak_reserved_bytes, 20 * k_mib); // 16 + the 2 pages lacking
  EXPECT_EQ(counter(*p, "stitched_pages"), 6u);
  EXPECT_EQ(counter(*p, "vmm_create"), 10u);
}
#endif

} // namespace
} // namespace gmem_bench
