#include "tools/analysis/frag_report.h"

#include <gtest/gtest.h>

#include "tests/tools/sample_trace.h"
#include "tools/analysis/trace_facts.h"
#include "tools/render/html_report.h"
#include "tools/render/printers.h"

namespace gmem::tools {
namespace {

using namespace testing;

// Walks a segment's ranges: sorted, touching, covering exactly.
void expect_covering(const segment_frag& s) {
  std::uint64_t at = 0, free_bytes = 0, used = 0;
  for (const auto& r : s.ranges) {
    EXPECT_EQ(r.offset, at);
    at += r.bytes;
    (r.used ? used : free_bytes) += r.bytes;
  }
  EXPECT_EQ(at, s.bytes);
  EXPECT_EQ(free_bytes, s.free_bytes);
  EXPECT_EQ(used, s.used_bytes);
}

TEST(frag_report, maps_segments_and_matches_pool_counters) {
  const auto t = sample_trace();
  const frag_report r = build_frag_report(t);
  ASSERT_EQ(r.devices.size(), 1u);
  const device_frag& d = r.devices[0];
  ASSERT_EQ(d.segments.size(), 3u);
  for (const auto& s : d.segments) {
    expect_covering(s);
    EXPECT_TRUE(s.is_valid());
  }
  EXPECT_EQ(d.reserved_bytes, 24u << 20);
  EXPECT_EQ(d.used_bytes, 10u << 20);
  // The sample's pool counters were written to agree with its live table: the gap-derived
  // numbers must match them (no pending blocks in the sample).
  EXPECT_EQ(d.free_bytes, t.devices[0].stats.free_bytes);
  EXPECT_EQ(d.free_bytes, t.devices[0].stats.reserved_bytes - t.devices[0].stats.live_bytes);
  EXPECT_EQ(d.largest_free, t.devices[0].stats.largest_free_block);
  EXPECT_EQ(d.largest_free, 7u << 20); // segment 1 after the 1 MiB block at 12 MiB
  EXPECT_EQ(d.largest_request, 7u << 20);
  EXPECT_NEAR(d.fragmentation(), t.devices[0].stats.fragmentation(), 1e-12);
  EXPECT_EQ(d.empty_segments, 1u);
  EXPECT_EQ(d.empty_bytes, 2u << 20);
  // Segment 0: four adjacent blocks merge into one used range, then 1 MiB free.
  const auto& s0 = d.segments[0];
  ASSERT_EQ(s0.ranges.size(), 2u);
  EXPECT_TRUE(s0.ranges[0].used);
  EXPECT_EQ(s0.ranges[0].blocks, 4u);
  EXPECT_EQ(s0.ranges[0].bytes, 1u << 20);
  EXPECT_EQ(s0.live_blocks, 4u);
  // Segment 1: used 8M, free 4M, used 1M, free 7M.
  const auto& s1 = d.segments[1];
  ASSERT_EQ(s1.ranges.size(), 4u);
  EXPECT_EQ(s1.ranges[1].bytes, 4u << 20);
  EXPECT_NEAR(s1.fragmentation(), 1.0 - 7.0 / 11.0, 1e-12);
  EXPECT_EQ(segment_map_line(s1, 20), "########....#.......");
  EXPECT_EQ(segment_map_line(d.segments[2], 8), "........");
  // The walker notices a broken map.
  segment_frag broken = s1;
  broken.ranges[1].bytes -= 512;
  EXPECT_FALSE(broken.is_valid());
  broken = s1;
  broken.largest_free += 1;
  EXPECT_FALSE(broken.is_valid());
}

TEST(frag_report, advice_names_options) {
  auto t = sample_trace();
  // Make most of the reserve an empty segment: advice must name GMEM_MAX_CACHED.
  t.segments.push_back({0x7f0010000000, 64u << 20, 0, 0});
  t.devices[0].stats.ooms = 2;
  t.devices[0].stats.limit_bytes = 96u << 20;
  const auto r = build_frag_report(t);
  std::string all;
  for (const auto& a : r.devices[0].advice)
    all += a + "\n";
  EXPECT_NE(all.find("GMEM_MAX_CACHED="), std::string::npos) << all;
  EXPECT_NE(all.find("GMEM_LIMIT"), std::string::npos) << all;
  EXPECT_NE(all.find("2 out-of-memory"), std::string::npos) << all;
}

// One 256 MiB segment split by three live blocks into ~64 MiB gaps: fragmented. The advice
// names the options of the policy the process ran under (its GMEM_ARENA at start).
std::string fragmented_advice(std::vector<std::pair<std::string, std::string>> options) {
  gmem::trace::trace t;
  t.info.options = std::move(options);
  constexpr std::uintptr_t base = 0x7f0000000000;
  t.segments.push_back({base, 256u << 20, 0, 0});
  for (std::uintptr_t at : {64u << 20, 128u << 20, 192u << 20})
    t.live.push_back(
        {base + at, 1u << 20, 1u << 20, 0, 0, gmem::trace::alloc_kind::device, 1, 0, 0});
  const auto r = build_frag_report(t);
  std::string all;
  for (const auto& a : r.devices.at(0).advice)
    all += a + "\n";
  return all;
}

TEST(frag_report, fragmentation_advice_follows_the_active_policy) {
  for (auto options : {std::vector<std::pair<std::string, std::string>>{},
                       std::vector<std::pair<std::string, std::string>>{{"GMEM_ARENA", "1"}}}) {
    const std::string arena = fragmented_advice(options);
    EXPECT_NE(arena.find("fragmented"), std::string::npos) << arena;
    EXPECT_NE(arena.find("GMEM_ARENA_PAGE_MB"), std::string::npos) << arena;
    EXPECT_NE(arena.find("GMEM_MAX_CACHED="), std::string::npos) << arena;
    EXPECT_EQ(arena.find("GMEM_OVERSIZE"), std::string::npos) << arena; // ignored by the arena
    EXPECT_EQ(arena.find("GMEM_LARGE_SEGMENT"), std::string::npos) << arena;
  }
  const std::string fallback = fragmented_advice({{"GMEM_ARENA", "0"}});
  EXPECT_NE(fallback.find("GMEM_OVERSIZE"), std::string::npos) << fallback;
  EXPECT_NE(fallback.find("GMEM_LARGE_SEGMENT"), std::string::npos) << fallback;
  EXPECT_EQ(fallback.find("GMEM_ARENA_PAGE_MB"), std::string::npos) << fallback;
}

// A 16 MiB arena segment with live blocks at 4 and 12 MiB: its gaps [0, 4) and [8, 12) are
// lent to an 8 MiB stitched range (live), so nothing is free and only 16 MiB is reserved.
gmem::trace::trace stitched_trace() {
  gmem::trace::trace t;
  t.info.options = {{"GMEM_STITCH", "1"}};
  constexpr std::uintptr_t base = 0x7f0000000000, range = 0x7e0000000000;
  t.segments.push_back({base, 16u << 20, 0, 0});
  t.segments.push_back({range, 8u << 20, 0, 0, true});
  for (std::uintptr_t at : {base + (4u << 20), base + (12u << 20)})
    t.live.push_back({at, 4u << 20, 4u << 20, 0, 0, gmem::trace::alloc_kind::device, 1, 0, 0});
  t.live.push_back({range, 8u << 20, 8u << 20, 0, 0, gmem::trace::alloc_kind::device, 1, 0, 0});
  gmem::trace::device_counters c;
  c.device = 0;
  c.stats.reserved_bytes = 16u << 20;
  c.stats.live_bytes = 16u << 20;
  c.stats.stitches = 3;
  c.stats.stitched_ranges = 1;
  c.stats.stitched_bytes = 8u << 20;
  c.stats.kept_ranges = 2;
  c.stats.kept_range_bytes = 12u << 20;
  c.stats.kept_reuses = 5;
  t.devices.push_back(c);
  return t;
}

TEST(frag_report, stitched_ranges_are_served_memory_not_reserve) {
  const auto t = stitched_trace();
  const frag_report r = build_frag_report(t);
  ASSERT_EQ(r.devices.size(), 1u);
  const device_frag& d = r.devices[0];
  ASSERT_EQ(d.segments.size(), 2u);
  EXPECT_TRUE(d.segments[0].stitched); // by address: the range first
  EXPECT_FALSE(d.segments[1].stitched);
  for (const auto& s : d.segments)
    EXPECT_TRUE(s.is_valid());
  EXPECT_EQ(d.reserved_bytes, 16u << 20);
  EXPECT_EQ(d.used_bytes, 16u << 20);
  EXPECT_EQ(d.requested_bytes, 16u << 20);
  EXPECT_EQ(d.free_bytes, 0u); // the arena's gaps are the range's pages
  EXPECT_EQ(d.stitched_ranges, 1u);
  EXPECT_EQ(d.stitched_bytes, 8u << 20);
  EXPECT_EQ(d.stitches, 3u);
  EXPECT_EQ(d.empty_segments, 0u);
  const std::string out = print_frag(t, r, {});
  EXPECT_NE(out.find("stitching: 8.00 MiB served from free arena pages in 1 stitched range live"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("3 made since start; 2 kept mapped for reuse (12.0 MiB of address space, "
                     "no memory), 5 served again"),
            std::string::npos)
      << out;
  EXPECT_EQ(d.kept_ranges, 2u);
  EXPECT_EQ(d.kept_range_bytes, 12u << 20);
  EXPECT_EQ(d.kept_reuses, 5u);
  EXPECT_NE(out.find("stitched from arena pages"), std::string::npos) << out;
  symbolizer symbols(module_ranges(t));
  const std::string h = html_report(t, symbols);
  EXPECT_NE(h.find("Stitching: 8.00 MiB served from free arena pages in 1 stitched range live"),
            std::string::npos);
  EXPECT_NE(h.find("2 kept mapped for reuse"), std::string::npos);
}

// With stitching on, the fragmentation advice no longer offers it, and says what it cannot do;
// off, it offers it.
TEST(frag_report, fragmentation_advice_knows_stitching) {
  const std::string on = fragmented_advice({{"GMEM_STITCH", "1"}});
  EXPECT_NE(on.find("Stitching (GMEM_STITCH=1) serves"), std::string::npos) << on;
  EXPECT_EQ(on.find("GMEM_STITCH=1 serves large requests"), std::string::npos) << on;
  EXPECT_NE(on.find("inside pages that live blocks touch"), std::string::npos) << on;
  const std::string off = fragmented_advice({});
  EXPECT_NE(off.find("GMEM_STITCH=1 serves large requests"), std::string::npos) << off;
  const std::string fallback = fragmented_advice({{"GMEM_ARENA", "0"}, {"GMEM_STITCH", "1"}});
  EXPECT_EQ(fallback.find("GMEM_STITCH"), std::string::npos) << fallback; // no arena: no pages
}

TEST(frag_report, no_segments_no_advice_to_tune) {
  gmem::trace::trace t;
  const auto r = build_frag_report(t);
  EXPECT_TRUE(r.devices.empty());
}

} // namespace
} // namespace gmem::tools
