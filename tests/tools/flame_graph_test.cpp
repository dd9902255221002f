#include "tools/render/flame_graph.h"

#include <gtest/gtest.h>

#include "tests/tools/sample_trace.h"
#include "tools/analysis/trace_facts.h"

namespace gmem::tools {
namespace {

using namespace testing;
using gmem::trace::event_type;
using by_stack = std::vector<std::pair<std::uint32_t, std::uint64_t>>;

by_stack peak_by_stack(const gmem::trace::trace& t, bool* complete, std::uint64_t* when) {
  by_stack out;
  for (const auto& s : live_at_peak_by_stack(t, complete, when))
    out.emplace_back(s.stack_id, s.bytes);
  return out;
}

std::size_t count_of(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1))
    ++n;
  return n;
}

TEST(flame_graph, peak_is_replayed_back_from_the_live_table) {
  const auto t = sample_trace();
  bool complete = false;
  std::uint64_t when = 0;
  // Just before the 2 MiB block of stack 2 was freed: 4 x 250 KiB (stack 1) + 8 + 2 MiB.
  EXPECT_EQ(peak_by_stack(t, &complete, &when), (by_stack{{1, 1000u << 10}, {2, 10u << 20}}));
  EXPECT_EQ(when, 1500 * k_ms);
  EXPECT_TRUE(complete);
  const auto live = live_at_peak(t, 0, &complete, &when);
  ASSERT_EQ(live.size(), 6u);
  EXPECT_EQ(live[5].address, k_seg1 + (8 << 20)); // re-added by its free, resolved by its alloc
  EXPECT_EQ(live[5].stack_id, 2u);
  EXPECT_EQ(live[5].time_ns, 1500 * k_ms);
}

TEST(flame_graph, allocations_older_than_the_ring_still_count_at_the_peak) {
  auto t = sample_trace();
  // Drop every event up to the 2 MiB alloc: its free remains, its stack is gone; the live
  // table's allocations keep theirs although the ring no longer holds their events.
  t.events.erase(t.events.begin(), t.events.begin() + 10);
  t.losses.lost_events = 10;
  bool complete = true;
  std::uint64_t when = 0;
  EXPECT_EQ(peak_by_stack(t, &complete, &when),
            (by_stack{{0, 2u << 20}, {1, 1000u << 10}, {2, 8u << 20}}));
  EXPECT_FALSE(complete);
}

TEST(flame_graph, peak_after_a_time_ignores_earlier_states) {
  const auto t = sample_trace();
  bool complete = false;
  std::uint64_t when = 0;
  // After 2.5 s the most that was live is the present state (the 1 MiB alloc at 3 s added).
  const auto live = live_at_peak(t, 2500 * k_ms, &complete, &when);
  std::uint64_t bytes = 0;
  for (const auto& a : live)
    bytes += a.requested;
  EXPECT_EQ(bytes, (1000u << 10) + (8u << 20) + (1u << 20) - 512);
  EXPECT_EQ(when, 3000 * k_ms);
}

TEST(flame_graph, present_state_is_the_peak_when_nothing_was_freed) {
  gmem::trace::trace t;
  t.live.push_back({0x1000, 100, 512, 0, 0, gmem::trace::alloc_kind::device, 1, 5, 7});
  add_event(t, event_type::alloc, 5, 0x1000, 100, 512, 7);
  bool complete = false;
  std::uint64_t when = 0;
  EXPECT_EQ(peak_by_stack(t, &complete, &when), (by_stack{{7, 100}}));
  EXPECT_EQ(when, 5u);
}

TEST(flame_graph, svg_draws_each_stack_and_skips_boxes_under_a_pixel) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  const std::string svg = flame_svg(t, symbols, outstanding_by_stack(t), 1040);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  // Root, stack 1 (2 frames), stack 2 (2 frames), stack 3 (1 frame): the shared outer frame
  // of stacks 1 and 2 is one box.
  EXPECT_EQ(count_of(svg, "<rect"), 5u);
  EXPECT_EQ(flame_svg(t, symbols, {}, 1040), "");
  // A stack holding a billionth of the bytes is narrower than a pixel: not drawn.
  const std::string thin = flame_svg(t, symbols, {{1, 1}, {3, 1'000'000'000}}, 1040);
  EXPECT_EQ(count_of(thin, "<rect"), 2u);
}

TEST(flame_graph, hostile_stack_counts_are_bounded) {
  auto t = sample_trace();
  std::vector<stack_bytes> input;
  for (std::uint32_t id = 100; id < 20100; ++id) {
    std::vector<std::uintptr_t> ips;
    for (std::uintptr_t d = 0; d < 200; ++d)
      ips.push_back(0x555500001000 + id * 256 + d);
    t.stacks[id] = ips;
    input.push_back({id, 1'000'000});
  }
  symbolizer symbols(module_ranges(t));
  const std::string svg = flame_svg(t, symbols, input, 1040);
  EXPECT_LE(count_of(svg, "<rect"), k_max_flame_frames);
  EXPECT_GT(count_of(svg, "<rect"), 0u);
}

} // namespace
} // namespace gmem::tools
