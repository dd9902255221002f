// docs/design.md "Reuse safety": a block is never handed out while device work issued before its
// free may still touch it. The fake fences decide when fences succeed and events complete;
// each test forces the pool to choose between the freed block and failing.
#include "pool/pool.h"
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

#include <thread>

namespace gmem::testing {
namespace {

constexpr stream_handle s1 = 0x100, s2 = 0x200;

struct reuse_test : ::testing::Test {
  // One small segment at most: the pool cannot grow around a freed block.
  pool_options tight() {
    pool_options o;
    o.limit_bytes = o.small_segment_bytes;
    o.grow_slack = -1;
    return o;
  }
  std::size_t whole() const { return pool_options{}.small_segment_bytes / 2; }
  fake_upstream up;
  fake_fences fe;
  recording_observer obs;
};

TEST_F(reuse_test, pending_block_waits_for_a_fence_the_pool_issues) {
  pool p(up, fe, tight(), &obs);
  auto a = p.allocate(whole()), b = p.allocate(whole());
  ASSERT_EQ(b.status, pool_status::ok);
  p.deallocate(a.address);
  std::uint64_t freed_at = fe.now();
  EXPECT_EQ(p.stats().pending_blocks, 1u);
  fe.sync_ok = false; // fences fail: the block must never come back
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(p.allocate(whole()).status, pool_status::out_of_memory);
  EXPECT_GE(fe.syncs, 1u);
  fe.sync_ok = true;
  auto c = p.allocate(whole());
  ASSERT_EQ(c.status, pool_status::ok);
  EXPECT_EQ(c.address, a.address);
  EXPECT_TRUE(fe.fenced_since(freed_at));
  EXPECT_EQ(obs.fences, 1u);
  EXPECT_EQ(obs.fence_released, whole());
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, barrier_hands_out_a_pending_block_without_a_host_sync) {
  pool_options o = tight();
  o.barriers = true;
  pool p(up, fe, o, &obs);
  auto a = p.allocate(whole()), b = p.allocate(whole());
  ASSERT_EQ(b.status, pool_status::ok);
  p.deallocate(a.address);
  std::uint64_t freed_at = fe.now();
  auto c = p.allocate(whole());
  ASSERT_EQ(c.status, pool_status::ok);
  EXPECT_EQ(c.address, a.address);
  EXPECT_TRUE(fe.fenced_since(freed_at)); // the barrier began after the free
  EXPECT_EQ(fe.barriers, 1u);
  EXPECT_EQ(fe.syncs, 0u);
  EXPECT_EQ(p.stats().barriers, 1u);
  EXPECT_EQ(p.stats().fences, 1u);
  EXPECT_EQ(obs.fence_released, whole());
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, failed_barrier_falls_back_to_a_synchronize) {
  pool_options o = tight();
  o.barriers = true;
  pool p(up, fe, o);
  auto a = p.allocate(whole()), b = p.allocate(whole());
  ASSERT_EQ(b.status, pool_status::ok);
  p.deallocate(a.address);
  fe.barrier_ok = false;
  fe.sync_ok = false; // neither works: the block must not come back
  EXPECT_EQ(p.allocate(whole()).status, pool_status::out_of_memory);
  EXPECT_EQ(p.stats().pending_blocks, 1u);
  fe.sync_ok = true;
  auto c = p.allocate(whole());
  ASSERT_EQ(c.status, pool_status::ok);
  EXPECT_EQ(c.address, a.address);
  EXPECT_GE(fe.syncs, 1u);
  EXPECT_EQ(p.stats().barriers, 0u);
}

TEST_F(reuse_test, without_the_option_no_barrier_is_tried) {
  pool p(up, fe, tight()); // pinned host memory: the CPU reads it, only a real sync will do
  auto a = p.allocate(whole()), b = p.allocate(whole());
  ASSERT_EQ(b.status, pool_status::ok);
  p.deallocate(a.address);
  ASSERT_EQ(p.allocate(whole()).status, pool_status::ok);
  EXPECT_EQ(fe.barriers, 0u);
  EXPECT_EQ(fe.syncs, 1u);
}

TEST_F(reuse_test, barrier_makes_another_streams_frees_safe_for_all) {
  pool_options o = tight();
  o.barriers = true;
  pool p(up, fe, o);
  auto a = p.allocate(whole(), s1), b = p.allocate(whole());
  ASSERT_EQ(b.status, pool_status::ok);
  p.deallocate(a.address, s1);
  event_handle ev = fe.last_event();
  std::uint64_t freed_at = fe.now();
  auto c = p.allocate(whole()); // stream-less: needs the block safe for every stream
  ASSERT_EQ(c.status, pool_status::ok);
  EXPECT_EQ(c.address, a.address);
  EXPECT_FALSE(fe.is_complete(ev)); // not by the event: by the barrier
  EXPECT_TRUE(fe.fenced_since(freed_at));
  EXPECT_EQ(fe.syncs, 0u);
  EXPECT_EQ(fe.live_events(), 0u); // the block's event was let go
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, one_fence_releases_a_whole_batch) {
  pool_options o = tight();
  pool p(up, fe, o);
  std::vector<std::uintptr_t> blocks;
  for (int i = 0; i < 64; ++i)
    blocks.push_back(p.allocate(o.small_segment_bytes / 64).address);
  for (auto a : blocks)
    p.deallocate(a);
  EXPECT_EQ(p.stats().pending_blocks, 64u);
  for (int i = 0; i < 64; ++i)
    ASSERT_EQ(p.allocate(o.small_segment_bytes / 64).status, pool_status::ok);
  EXPECT_EQ(fe.syncs, 1u);
  EXPECT_EQ(p.stats().fences, 1u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, external_fence_counts_only_if_it_began_after_the_free) {
  pool p(up, fe, tight());
  auto a = p.allocate(whole()), b = p.allocate(whole());
  (void)b;
  fe.sync_ok = false;
  std::uint64_t early = p.begin_external_fence(); // began before the free: covers nothing
  p.deallocate(a.address);
  p.end_external_fence(early);
  EXPECT_EQ(p.stats().pending_blocks, 1u);
  EXPECT_EQ(p.allocate(whole()).status, pool_status::out_of_memory);
  std::uint64_t late = p.begin_external_fence();
  p.end_external_fence(late);
  EXPECT_EQ(p.stats().pending_blocks, 0u);
  std::size_t syncs = fe.syncs;
  EXPECT_EQ(p.allocate(whole()).address, a.address);
  EXPECT_EQ(fe.syncs, syncs); // no fence of its own needed
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, stream_free_is_reusable_at_once_on_its_stream) {
  pool p(up, fe, tight());
  auto a = p.allocate(4096, s1);
  p.deallocate(a.address, s1);
  EXPECT_EQ(p.allocate(4096, s1).address, a.address);
  EXPECT_EQ(fe.syncs, 0u);
  EXPECT_EQ(fe.queries, 0u);
  EXPECT_EQ(fe.live_events(), 0u); // the event went back once the block was reused
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, other_stream_gets_it_only_through_a_dependency) {
  pool p(up, fe, tight());
  auto a = p.allocate(whole(), s1), b = p.allocate(whole(), s1);
  (void)b;
  const std::uint64_t freed_at = fe.now();
  p.deallocate(a.address, s1);
  EXPECT_EQ(fe.records_on(s1), 0u); // the free itself makes no driver call
  auto c = p.allocate(whole(), s2);
  ASSERT_EQ(c.status, pool_status::ok);
  EXPECT_EQ(c.address, a.address);
  // cuStreamWaitEvent(s2, e) before handing it out, e recorded on s1 after the free.
  EXPECT_TRUE(fe.waited_since(s2, s1, freed_at));
  EXPECT_FALSE(fe.completed_since(s1, freed_at));
  EXPECT_EQ(fe.syncs, 0u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, failed_dependency_keeps_the_block_back) {
  pool p(up, fe, tight());
  auto a = p.allocate(whole(), s1), b = p.allocate(whole(), s1);
  (void)b;
  p.deallocate(a.address, s1);
  fe.wait_ok = false;
  fe.sync_ok = false;
  EXPECT_EQ(p.allocate(whole(), s2).status, pool_status::out_of_memory);
  EXPECT_EQ(p.stats().stream_free_bytes, whole());
  EXPECT_EQ(p.allocate(whole(), s1).address, a.address); // still fine on its own stream
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, completed_event_makes_it_safe_for_all) {
  pool p(up, fe, tight());
  auto a = p.allocate(whole(), s1), b = p.allocate(whole(), s1);
  (void)b;
  p.deallocate(a.address, s1);
  fe.sync_ok = false;
  EXPECT_EQ(p.allocate(whole()).status, pool_status::out_of_memory); // stream-less: no wait
  fe.complete(fe.last_event());
  EXPECT_EQ(p.allocate(whole()).address, a.address);
  EXPECT_FALSE(fe.waited(k_no_stream, fe.last_event()));
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, stream_less_allocation_takes_stream_free_block_after_a_fence) {
  pool p(up, fe, tight());
  auto a = p.allocate(whole(), s1), b = p.allocate(whole(), s1);
  (void)b;
  p.deallocate(a.address, s1);
  std::uint64_t freed_at = fe.now();
  auto c = p.allocate(whole());
  ASSERT_EQ(c.address, a.address);
  EXPECT_TRUE(fe.fenced_since(freed_at));
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, stream_synchronized_makes_its_frees_safe) {
  pool p(up, fe, tight());
  auto a = p.allocate(whole(), s1), b = p.allocate(whole(), s1);
  (void)b;
  fe.sync_ok = false;
  std::uint64_t t = p.begin_stream_sync();
  p.deallocate(a.address, s1); // races with the synchronize: not covered
  p.end_stream_sync(s1, t);
  EXPECT_EQ(p.allocate(whole()).status, pool_status::out_of_memory);
  p.end_stream_sync(s2, p.begin_stream_sync()); // another stream's sync: not covered
  EXPECT_EQ(p.allocate(whole()).status, pool_status::out_of_memory);
  p.stream_synchronized(s1);
  EXPECT_EQ(p.allocate(whole()).address, a.address);
  EXPECT_TRUE(p.is_valid());
}

// No event can be recorded (a stream capturing a graph, a driver error): the block stays
// unsealed, reusable on its stream, and for other streams only after a fence.
TEST_F(reuse_test, failed_seal_leaves_the_block_to_a_fence) {
  pool p(up, fe, tight());
  auto a = p.allocate(whole(), s1), b = p.allocate(whole(), s1);
  (void)b;
  fe.record_ok = false;
  p.deallocate(a.address, s1);
  EXPECT_EQ(p.stats().stream_free_bytes, whole());
  fe.sync_ok = false;
  EXPECT_EQ(p.allocate(whole(), s2).status, pool_status::out_of_memory);
  EXPECT_TRUE(fe.waits.empty());
  const std::uint64_t before = fe.now();
  fe.sync_ok = true;
  EXPECT_EQ(p.allocate(whole(), s2).address, a.address);
  EXPECT_TRUE(fe.fenced_since(before));
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, oom_ladder_fences_then_trims_then_fails) {
  pool_options o;
  o.grow_slack = -1;
  o.oversize_bytes = 20 * k_mib; // 40 and 22 MiB: an oversize segment each
  up.set_capacity(64 * k_mib);
  pool p(up, fe, o, &obs);
  auto big = p.allocate(40 * k_mib), other = p.allocate(22 * k_mib);
  ASSERT_EQ(other.status, pool_status::ok);
  p.deallocate(big.address); // pending
  // 36 MiB: the device is full; the fence frees the 40 MiB block, which serves it.
  auto c = p.allocate(36 * k_mib);
  ASSERT_EQ(c.status, pool_status::ok);
  EXPECT_EQ(c.address, big.address);
  EXPECT_EQ(obs.fences, 1u);
  // Free everything; 60 MiB needs the two idle segments trimmed first.
  p.deallocate(c.address);
  p.deallocate(other.address);
  auto d = p.allocate(60 * k_mib);
  ASSERT_EQ(d.status, pool_status::ok);
  EXPECT_GE(p.stats().trims, 1u);
  EXPECT_EQ(p.allocate(60 * k_mib).status, pool_status::out_of_memory);
  EXPECT_EQ(obs.ooms, 1u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, prefers_a_fence_to_growing_when_pending_blocks_would_do) {
  pool_options o;
  pool p(up, fe, o);
  // Four blocks fill one large segment exactly.
  const std::size_t quarter = o.large_segment_bytes / 4;
  auto a = p.allocate(quarter), b = p.allocate(quarter), c = p.allocate(quarter),
       d = p.allocate(quarter);
  (void)c;
  (void)d;
  p.deallocate(a.address);
  p.deallocate(b.address);
  std::size_t maps = up.maps;
  auto e = p.allocate(quarter + quarter / 2);
  ASSERT_EQ(e.status, pool_status::ok);
  EXPECT_EQ(up.maps, maps);
  EXPECT_EQ(e.address, a.address); // a and b merged after the fence
  EXPECT_EQ(fe.syncs, 1u);
}

TEST_F(reuse_test, without_reuse_safety_a_free_is_reused_at_once) {
  // The hazard the invariant prevents: the block comes back while the device may still use it.
  pool_options o = tight();
  o.reuse_safety = false;
  pool p(up, fe, o);
  auto a = p.allocate(4096);
  p.deallocate(a.address);
  EXPECT_EQ(p.allocate(4096, s2).address, a.address);
  EXPECT_EQ(fe.syncs, 0u);
  EXPECT_EQ(fe.events.size(), 0u);
}

// Frees on a stream record nothing; neighbouring ones merge (the event a later seal records
// on the stream covers both frees), whichever thread freed them.
TEST_F(reuse_test, frees_on_a_stream_merge_and_record_no_event) {
  pool_options o = tight();
  o.thread_caches = false; // the pool's own merging (a thread's cache keeps its frees apart)
  pool p(up, fe, o);
  auto a = p.allocate(4096, s1), b = p.allocate(4096, s1), c = p.allocate(4096, s1);
  (void)c;
  p.deallocate(a.address, s1);
  std::thread([&] { p.deallocate(b.address, s1); }).join();
  std::size_t pieces = 0;
  p.for_each_segment([&](const segment_view& v) {
    for (const auto& x : v.blocks)
      pieces += x.state == block_state::stream_free ? 1 : 0;
  });
  EXPECT_EQ(pieces, 1u); // merged
  for (int i = 0; i < 1000; ++i)
    p.deallocate(p.allocate(512, s1).address, s1);
  EXPECT_EQ(fe.events.size(), 0u);                    // no event recorded by any free
  EXPECT_EQ(p.allocate(8192, s1).address, a.address); // one 8 KiB block now
  EXPECT_TRUE(p.is_valid());
}

// A free next to a sealed block merges with it and unseals it: another stream then gets the
// merged block only through an event recorded after the later free, not the old one.
TEST_F(reuse_test, a_free_next_to_a_sealed_block_unseals_it) {
  pool_options o = tight();
  o.thread_caches = false; // the pool's own sealing (a thread's cache would keep a)
  pool p(up, fe, o);
  auto a = p.allocate(4096, s1), b = p.allocate(4096, s1), c = p.allocate(4096, s1);
  const std::size_t fill = (pool_options{}.small_segment_bytes - 3 * 4096) / 2;
  auto f1 = p.allocate(fill, s1), f2 = p.allocate(fill, s1); // the segment is full
  ASSERT_EQ(f2.status, pool_status::ok);
  (void)c;
  (void)f1;
  fe.sync_ok = false;
  fe.wait_ok = false;
  p.deallocate(a.address, s1);
  EXPECT_EQ(p.allocate(4096, s2).status, pool_status::out_of_memory); // seals a; no wait
  EXPECT_EQ(fe.records_on(s1), 1u);
  const std::uint64_t freed_b = fe.now();
  p.deallocate(b.address, s1);
  EXPECT_EQ(fe.live_events(), 0u); // a's event went back with the merge
  fe.wait_ok = true;
  auto d = p.allocate(8192, s2);
  ASSERT_EQ(d.status, pool_status::ok);
  EXPECT_EQ(d.address, a.address);
  EXPECT_TRUE(fe.waited_since(s2, s1, freed_b));
  EXPECT_TRUE(p.is_valid());
}

// The slow path seals only streams holding a block that could serve the request: a seal is a
// driver call.
TEST_F(reuse_test, only_streams_that_could_serve_the_request_are_sealed) {
  pool p(up, fe, tight());
  constexpr stream_handle s3 = 0x300;
  auto a = p.allocate(4096, s1), b = p.allocate(4096, s1), c = p.allocate(65536, s3);
  const std::size_t fill = (pool_options{}.small_segment_bytes - 2 * 4096 - 65536) / 2;
  auto f1 = p.allocate(fill, s1), f2 = p.allocate(fill, s1); // the segment is full
  ASSERT_EQ(f2.status, pool_status::ok);
  (void)b;
  (void)f1;
  p.deallocate(a.address, s1);
  p.deallocate(c.address, s3);
  auto d = p.allocate(32768, s2); // only s3's block fits
  ASSERT_EQ(d.status, pool_status::ok);
  EXPECT_EQ(fe.records_on(s1), 0u);
  EXPECT_EQ(fe.records_on(s3), 1u);
  EXPECT_TRUE(p.is_valid());
}

TEST_F(reuse_test, events_are_released_exactly_once) {
  {
    pool p(up, fe, pool_options{});
    std::vector<std::uintptr_t> v;
    for (int i = 0; i < 100; ++i)
      v.push_back(p.allocate(1000 + 512 * std::size_t(i), s1).address);
    for (std::size_t i = 0; i < v.size(); i += 2)
      p.deallocate(v[i], s1);
    for (int i = 0; i < 20; ++i)
      p.allocate(1000, s1);
    for (std::size_t i = 1; i < v.size(); i += 2)
      p.deallocate(v[i], s2);
    fe.complete_all();
    p.allocate(64 * k_mib); // slow path queries the events
    EXPECT_TRUE(p.is_valid());
  }
  EXPECT_EQ(fe.live_events(), 0u);
  EXPECT_EQ(fe.bad_releases, 0u);
  EXPECT_EQ(fe.bad_uses, 0u);
}

} // namespace
} // namespace gmem::testing
