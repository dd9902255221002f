// At the limit, pending blocks of any class must be reclaimed by a fence (and their idle
// segments trimmed) before the pool reports out of memory. Found through the client API:
// under GMEM_LIMIT=24M, after one round of 7 MiB + 8 MiB frees every allocation failed.
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

namespace gmem::testing {
namespace {

TEST(limit_reclaim, pending_blocks_of_shrunk_segments_come_back_after_a_fence) {
  fake_upstream up;
  fake_fences fe;
  pool_options o;
  o.limit_bytes = 24 * k_mib; // below the large segment size: segments are shrunk to fit
  pool p(up, fe, o);
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(round);
    alloc_result a = p.allocate(7 * k_mib);
    alloc_result b = p.allocate(8 * k_mib);
    ASSERT_EQ(a.status, pool_status::ok);
    ASSERT_EQ(b.status, pool_status::ok);
    ASSERT_EQ(p.deallocate(a.address), pool_status::ok);
    ASSERT_EQ(p.deallocate(b.address), pool_status::ok);
    alloc_result c = p.allocate(8 * k_mib);
    alloc_result d = p.allocate(7 * k_mib);
    ASSERT_EQ(c.status, pool_status::ok);
    ASSERT_EQ(d.status, pool_status::ok);
    ASSERT_EQ(p.deallocate(c.address), pool_status::ok);
    ASSERT_EQ(p.deallocate(d.address), pool_status::ok);
    EXPECT_TRUE(p.is_valid());
  }
  pool_stats s = p.stats();
  EXPECT_LE(s.peak_reserved_bytes, o.limit_bytes);
  EXPECT_GT(s.fences, 0u);
  EXPECT_EQ(s.ooms, 0u);
}

TEST(limit_reclaim, still_out_of_memory_when_live_blocks_fill_the_limit) {
  fake_upstream up;
  fake_fences fe;
  pool_options o;
  o.limit_bytes = 24 * k_mib;
  pool p(up, fe, o);
  alloc_result a = p.allocate(20 * k_mib);
  ASSERT_EQ(a.status, pool_status::ok);
  EXPECT_EQ(p.allocate(8 * k_mib).status, pool_status::out_of_memory);
  ASSERT_EQ(p.deallocate(a.address), pool_status::ok);
  EXPECT_EQ(p.allocate(8 * k_mib).status, pool_status::ok); // after a fence and a trim
}

} // namespace
} // namespace gmem::testing
