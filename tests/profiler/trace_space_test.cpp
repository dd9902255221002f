// The extent allocator under a trace: growth, refusal, and reuse of extents given back.
#include "profiler/format/trace_space.h"

#include <algorithm>

#include <gtest/gtest.h>

#include "tests/profiler/space_fixture.h"

namespace gmem::trace {
namespace {

struct counting_backing final : trace_backing {
  std::uint64_t limit = 0, calls = 0;
  bool grow(std::uint64_t bytes) noexcept override {
    ++calls;
    return bytes <= limit;
  }
};

TEST(trace_space, grows_through_its_backing_and_stops_at_its_refusal) {
  std::vector<std::uint64_t> memory(1 << 16, 0);
  layout::header* h = reinterpret_cast<layout::header*>(memory.data());
  counting_backing b;
  b.limit = layout::k_header_bytes + 4096;
  trace_space s(reinterpret_cast<std::byte*>(memory.data()), memory.size() * 8,
                layout::k_header_bytes, &h->total_bytes, &h->growth_refused, &h->flags, &b);
  EXPECT_EQ(h->total_bytes, layout::k_header_bytes);
  EXPECT_EQ(s.allocate(100), layout::k_header_bytes); // rounded up to 128
  EXPECT_EQ(h->total_bytes, layout::k_header_bytes + 128);
  EXPECT_EQ(s.allocate(8192), 0u);
  EXPECT_EQ(h->growth_refused, 1u);
  EXPECT_NE(h->flags & layout::k_flag_full, 0u);
  EXPECT_EQ(s.allocate(64), layout::k_header_bytes + 128); // smaller still fits
}

// An extent is late when the backing had not made its bytes ahead of the allocation: a
// growth to bytes already backed, or bytes reused from a spare, are not.
struct ahead_backing final : trace_backing {
  std::uint64_t ready = 0; // what a helper has backed so far
  bool grow(std::uint64_t bytes) noexcept override {
    ready = std::max(ready, bytes);
    return true;
  }
  bool backed(std::uint64_t bytes) const noexcept override { return bytes <= ready; }
};

TEST(trace_space, allocate_says_whether_the_backing_was_late) {
  std::vector<std::uint64_t> memory(1 << 16, 0);
  layout::header* h = reinterpret_cast<layout::header*>(memory.data());
  ahead_backing b;
  trace_space s(reinterpret_cast<std::byte*>(memory.data()), memory.size() * 8,
                layout::k_header_bytes, &h->total_bytes, &h->growth_refused, &h->flags, &b);
  bool late = false;
  const std::uint64_t a = s.allocate(4096, &late);
  EXPECT_EQ(a, layout::k_header_bytes);
  EXPECT_TRUE(late);                           // nothing was backed ahead
  b.ready = layout::k_header_bytes + 3 * 4096; // the helper made the next two ahead
  late = true;
  EXPECT_NE(s.allocate(4096, &late), 0u);
  EXPECT_FALSE(late);
  late = true;
  EXPECT_NE(s.allocate(4096, &late), 0u);
  EXPECT_FALSE(late);
  EXPECT_NE(s.allocate(4096, &late), 0u);
  EXPECT_TRUE(late); // beyond what it made
  s.retire(a, 4096);
  late = true;
  EXPECT_EQ(s.allocate(4096, &late), a);
  EXPECT_FALSE(late); // a spare: no growth at all
}

TEST(trace_space, given_back_extents_merge_and_are_reused_cleared) {
  testing::space_fixture f;
  const std::uint64_t a = f.space.allocate(1024), b = f.space.allocate(1024),
                      c = f.space.allocate(1024), d = f.space.allocate(64);
  f.space.words(a)[0] = 7;
  f.space.retire(a, 1024);
  f.space.retire(b, 1024); // merges with a: 2048 spare bytes at a
  EXPECT_EQ(f.space.allocate(2048), a);
  EXPECT_EQ(f.space.words(a)[0], 0u); // cleared
  f.space.retire(d, 64);              // the last extent: the end moves back
  f.space.retire(c, 1024);
  const std::uint64_t end = f.space.used_bytes();
  EXPECT_EQ(end, c);
  EXPECT_EQ(f.space.allocate(512), c); // from the end again, no growth
  EXPECT_EQ(f.size(), d + 64);         // the published size never shrinks
}

TEST(trace_space, best_fit_splits_a_spare) {
  testing::space_fixture f;
  const std::uint64_t a = f.space.allocate(4096);
  (void)f.space.allocate(64); // keeps a and b apart
  const std::uint64_t b = f.space.allocate(1024);
  (void)f.space.allocate(64); // keeps b from touching the end
  f.space.retire(a, 4096);
  f.space.retire(b, 1024);
  EXPECT_EQ(f.space.allocate(1024), b); // the exact fit, not the front of the larger one
  EXPECT_EQ(f.space.allocate(1024), a); // then cut from the larger one
  EXPECT_EQ(f.space.allocate(3072), a + 1024);
}

} // namespace
} // namespace gmem::trace
