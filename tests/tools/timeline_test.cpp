#include "tools/analysis/timeline.h"

#include <gtest/gtest.h>

#include "tests/tools/sample_trace.h"

namespace gmem::tools {
namespace {

using namespace testing;

TEST(timeline, rebuilds_live_and_reserved_and_ends_at_present_state) {
  const auto t = sample_trace();
  const timeline tl = build_timeline(t);
  ASSERT_EQ(tl.devices.size(), 1u);
  const auto& d = tl.devices[0];
  EXPECT_EQ(d.points.front().live, 0u);
  EXPECT_EQ(d.points.front().reserved, 0u);
  EXPECT_EQ(d.points.back().live, 10u << 20);
  EXPECT_EQ(d.points.back().reserved, 24u << 20);
  EXPECT_EQ(d.peak_live, 11u << 20); // 1 + 8 + 2 MiB before the 2 MiB free
  EXPECT_EQ(d.peak_reserved, 24u << 20);
  EXPECT_EQ(tl.end_ns, 5000 * k_ms);
  for (std::size_t i = 1; i < d.points.size(); ++i)
    EXPECT_LE(d.points[i - 1].t_ns, d.points[i].t_ns);
  ASSERT_EQ(tl.marks.size(), 3u);
  EXPECT_EQ(tl.marks[0].kind, mark_kind::marker);
  EXPECT_EQ(tl.marks[0].label, "epoch 1");
  EXPECT_EQ(tl.marks[1].kind, mark_kind::fence);
  EXPECT_EQ(tl.marks[1].duration_ns, 50'000u);
  EXPECT_EQ(tl.marks[2].kind, mark_kind::oom);
  EXPECT_EQ(tl.marks[2].bytes, 64u << 20);
}

TEST(timeline, lost_events_shift_the_curve) {
  auto t = sample_trace();
  t.events.erase(t.events.begin(), t.events.begin() + 4); // the segment maps and one alloc
  t.losses.lost_events = 4;
  const timeline tl = build_timeline(t);
  ASSERT_EQ(tl.devices.size(), 1u);
  EXPECT_TRUE(tl.lost_events);
  EXPECT_EQ(tl.devices[0].points.front().reserved, 24u << 20); // anchored: mapped before the window
  EXPECT_EQ(tl.devices[0].points.back().live, 10u << 20);
}

} // namespace
} // namespace gmem::tools
