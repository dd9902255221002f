#include "tools/flame_graph.h"

#include <gtest/gtest.h>

#include "tests/tools/sample_trace.h"

namespace gmem::tools {
namespace {

using namespace testing;
using gmem::trace::event_type;

std::size_t count_of(const std::string& s, const std::string& what) {
  std::size_t n = 0;
  for (auto p = s.find(what); p != std::string::npos; p = s.find(what, p + 1))
    ++n;
  return n;
}

TEST(flame_graph, peak_is_replayed_back_from_the_live_table) {
  const auto t = sample_trace();
  const peak_live_set p = live_at_peak(t);
  // Just before the 2 MiB block of stack 2 was freed: 4 x 250 KiB (stack 1) + 8 + 2 MiB.
  EXPECT_EQ(p.bytes, (1000u << 10) + (10u << 20));
  EXPECT_EQ(p.time_ns, 1500 * k_ms);
  EXPECT_TRUE(p.complete);
  const std::vector<std::pair<std::uint32_t, std::uint64_t>> want = {{1, 1000u << 10},
                                                                     {2, 10u << 20}};
  EXPECT_EQ(p.bytes_by_stack, want);
}

TEST(flame_graph, peak_without_the_allocating_event_has_an_unknown_stack) {
  auto t = sample_trace();
  // Drop every event up to the 2 MiB alloc: its free remains, its stack is gone.
  t.events.erase(t.events.begin(), t.events.begin() + 10);
  t.losses.lost_events = 10;
  const peak_live_set p = live_at_peak(t);
  EXPECT_FALSE(p.complete);
  EXPECT_EQ(p.bytes, (1000u << 10) + (10u << 20));
  const std::vector<std::pair<std::uint32_t, std::uint64_t>> want = {
      {0, 2u << 20}, {1, 1000u << 10}, {2, 8u << 20}};
  EXPECT_EQ(p.bytes_by_stack, want);
}

TEST(flame_graph, present_state_is_the_peak_when_nothing_was_freed) {
  gmem::trace::trace t;
  t.live.push_back({0x1000, 100, 512, 0, 0, gmem::trace::alloc_kind::device, 1, 5, 7});
  add_event(t, event_type::alloc, 5, 0x1000, 100, 512, 7);
  const peak_live_set p = live_at_peak(t);
  EXPECT_EQ(p.bytes, 100u);
  ASSERT_EQ(p.bytes_by_stack.size(), 1u);
  EXPECT_EQ(p.bytes_by_stack[0].first, 7u);
}

TEST(flame_graph, stacks_merge_by_common_outer_frames) {
  const flame_node root = build_flame({{{"main", "train", "alloc"}, 100},
                                       {{"main", "train", "other"}, 50},
                                       {{"main", "eval"}, 25},
                                       {{}, 5}},
                                      "outstanding");
  ASSERT_TRUE(root.is_valid());
  EXPECT_EQ(root.bytes, 180u);
  ASSERT_EQ(root.children.size(), 2u); // "(no stack recorded)" sorts before "main"
  EXPECT_EQ(root.children[0].label, "(no stack recorded)");
  const flame_node& main = root.children[1];
  EXPECT_EQ(main.bytes, 175u);
  ASSERT_EQ(main.children.size(), 2u);
  EXPECT_EQ(main.children[1].label, "train");
  EXPECT_EQ(main.children[1].bytes, 150u);
  EXPECT_EQ(main.children[1].children.size(), 2u);
}

TEST(flame_graph, hostile_sizes_are_bounded) {
  std::vector<flame_stack> stacks;
  for (std::size_t i = 0; i < k_max_flame_stacks + 1000; ++i)
    stacks.push_back({{"main", "f" + std::to_string(i)}, 1000 + i});
  flame_stack deep{{}, 1};
  for (int d = 0; d < 1000; ++d)
    deep.frames.push_back("d" + std::to_string(d));
  stacks.push_back(deep);
  const flame_node root = build_flame(stacks, "root");
  ASSERT_TRUE(root.is_valid());
  bool other = false;
  for (const auto& c : root.children)
    other |= c.label == "(1001 more stacks)"; // the 1000 smallest f's and the deep one
  EXPECT_TRUE(other);
  for (const auto& c : root.children)
    EXPECT_LE(c.label.size(), 40u);

  // 60 stacks of 64 distinct frames, each 17 px wide: 3900 boxes of a pixel or more.
  std::vector<flame_stack> wide;
  for (int i = 0; i < 60; ++i) {
    flame_stack s{{}, 1000};
    for (std::size_t d = 0; d < k_max_flame_depth; ++d)
      s.frames.push_back("s" + std::to_string(i) + "." + std::to_string(d));
    wide.push_back(s);
  }
  EXPECT_EQ(count_of(flame_svg(build_flame(wide, "root"), 1040), "<rect"), k_max_flame_boxes);
}

TEST(flame_graph, svg_escapes_labels_and_skips_boxes_under_a_pixel) {
  const flame_node root =
      build_flame({{{"<script>alert(1)</script>", "big"}, 1'000'000}, {{"tiny"}, 1}}, "root");
  const std::string svg = flame_svg(root, 1000);
  EXPECT_EQ(svg.find("<script>"), std::string::npos);
  EXPECT_NE(svg.find("&lt;script&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("tiny"), std::string::npos);
  EXPECT_EQ(count_of(svg, "<rect"), 3u); // root, the escaped frame, big
  EXPECT_EQ(flame_svg(flame_node{}, 1000), "");
}

} // namespace
} // namespace gmem::tools
