// Marks (pool_options::marks, fences::mark): while threads contend for fences, a slow
// allocation first asks whether the mark an earlier one recorded has completed; a completed
// mark makes the blocks freed before it safe for all with no barrier, and never those freed
// after it. One thread's fences never use marks.
#include "pool/pool.h"
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <thread>

namespace gmem::testing {
namespace {

constexpr std::size_t k_block = 64 * 1024;

struct marks_test : ::testing::Test {
  static pool_options options() {
    pool_options o = one_segment_options(); // the limit stops growth: reuse or fail
    o.barriers = true;
    o.marks = true;
    return o;
  }
  // Fills the segment; every later allocation needs a block freed earlier.
  void fill() {
    blocks = fill_segment(p, k_block, k_no_stream);
    ASSERT_EQ(std::count(blocks.begin(), blocks.end(), 0u), 0);
  }
  // Two threads fence at once: A's barrier is held while B asks for a fence, which turns marks
  // on. Uses blocks[0] and blocks[1]; both threads get a block back.
  void contend() {
    first_call_gate gate;
    fe.before_barrier = [&] { gate.pass(); };
    ASSERT_EQ(p.deallocate(blocks[0]), pool_status::ok);
    std::uintptr_t got[2] = {};
    std::thread a([&] { got[0] = p.allocate(k_block).address; });
    while (gate.calls() == 0) // A is inside its barrier
      std::this_thread::yield();
    ASSERT_EQ(p.deallocate(blocks[1]), pool_status::ok);
    std::thread b([&] { got[1] = p.allocate(k_block).address; });
    while (p.slow_path().fence_calls < 2) // B asked while A's barrier runs
      std::this_thread::yield();
    gate.open();
    a.join();
    b.join();
    fe.before_barrier = nullptr;
    blocks[0] = got[0];
    blocks[1] = got[1];
    ASSERT_NE(got[0], 0u);
    ASSERT_NE(got[1], 0u);
  }
  fake_upstream up;
  fake_fences fe;
  std::unique_ptr<pool> owner = std::make_unique<pool>(up, fe, options());
  pool& p = *owner;
  std::vector<std::uintptr_t> blocks;
};

TEST_F(marks_test, one_thread_fences_with_barriers_alone) {
  fill();
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(p.deallocate(blocks[0]), pool_status::ok);
    blocks[0] = p.allocate(k_block).address;
    ASSERT_NE(blocks[0], 0u);
  }
  EXPECT_EQ(fe.marks, 0u);
  EXPECT_EQ(p.slow_path().marks, 0u);
  EXPECT_EQ(fe.barriers, 8u);
}

TEST_F(marks_test, a_completed_mark_hands_out_what_was_freed_before_it_with_no_barrier) {
  fill();
  contend();
  // Fences fail from here on: only a mark can hand a freed block out.
  fe.barrier_ok = false;
  fe.sync_ok = false;
  const std::uintptr_t x = blocks[2];
  ASSERT_EQ(p.deallocate(x), pool_status::ok);
  const std::uint64_t x_freed = fe.now();
  // No mark yet: this slow allocation records one (after x's free) and fails.
  EXPECT_EQ(p.allocate(k_block).status, pool_status::out_of_memory);
  ASSERT_EQ(p.slow_path().marks, 1u);
  const event_handle m = fe.last_event();
  // Still running: asked, not used; no second mark while it runs.
  EXPECT_EQ(p.allocate(k_block).status, pool_status::out_of_memory);
  EXPECT_EQ(p.slow_path().marks, 1u);
  fe.complete(m);
  const std::size_t barriers = fe.barriers, syncs = fe.syncs;
  const alloc_result r = p.allocate(k_block);
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_EQ(r.address, x);
  EXPECT_TRUE(fe.fenced_since(x_freed));
  EXPECT_EQ(fe.barriers, barriers); // no barrier tried
  EXPECT_EQ(fe.syncs, syncs);
  EXPECT_EQ(p.slow_path().marks_used, 1u);
  EXPECT_EQ(p.slow_path().marks, 2u); // the next one, recorded when m was used
  // A block freed after the mark in flight is not covered by it, complete or not.
  ASSERT_EQ(p.deallocate(blocks[3]), pool_status::ok);
  fe.complete(fe.last_event());
  EXPECT_EQ(p.allocate(k_block).status, pool_status::out_of_memory);
  EXPECT_EQ(p.stats().pending_blocks, 1u);
  EXPECT_TRUE(p.is_valid());
  // The pool lets go of the mark in flight (recorded when the last one was used).
  EXPECT_EQ(p.slow_path().marks, 3u);
  owner.reset();
  EXPECT_EQ(fe.live_events(), 0u);
  EXPECT_EQ(fe.bad_releases, 0u);
}

TEST_F(marks_test, a_mark_the_driver_refuses_leaves_the_fence_to_a_barrier) {
  fill();
  contend();
  fe.mark_ok = false; // a capture may be open, say
  const std::size_t marks = fe.marks, barriers = fe.barriers;
  ASSERT_EQ(p.deallocate(blocks[2]), pool_status::ok);
  const std::uint64_t freed = fe.now();
  const alloc_result r = p.allocate(k_block);
  ASSERT_EQ(r.status, pool_status::ok);
  EXPECT_EQ(r.address, blocks[2]);
  EXPECT_GT(fe.marks, marks); // asked for
  EXPECT_EQ(fe.barriers, barriers + 1);
  EXPECT_TRUE(fe.fenced_since(freed));
  EXPECT_EQ(p.slow_path().marks, 0u);
  EXPECT_EQ(p.slow_path().marks_refused, 1u);
}

} // namespace
} // namespace gmem::testing
