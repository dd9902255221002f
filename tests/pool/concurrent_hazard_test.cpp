// Reuse safety under concurrency: eight threads allocate and free on their own streams, on a
// shared stream and on no stream while another thread completes events, so that frees,
// seals (the slow path's event records), waits and fences race. A shared hazard table proves
// every reused byte was made safe by the rules of tests/pool/random_test.cpp: the same
// stream, a fence begun after the free, or an event recorded on the freeing stream after the
// free that completed or that the new owner's stream waits for. Meant to run under TSan too.
#include "pool/pool.h"
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace gmem::testing {
namespace {

#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__) || defined(GMEM_DEBUG)
constexpr int k_ops_per_thread = 2'000;
#else
constexpr int k_ops_per_thread = 20'000;
#endif
constexpr int k_threads = 8;
constexpr stream_handle k_shared = 0x900;

struct freed {
  std::size_t size;
  stream_handle stream;
  std::uint64_t at;       // fake_fences clock read before the free
  bool destroyed = false; // the stream was destroyed since: its handle names another stream
};

class hazard_table {
public:
  explicit hazard_table(fake_fences& fe) : fe_(fe) {}
  // Called before the pool sees the free: from then on the range may be handed out.
  void freeing(std::uintptr_t a, std::size_t size, stream_handle s) {
    const std::uint64_t t = fe_.now();
    std::lock_guard lock(mu_);
    hazards_[a] = freed{size, s, t};
  }
  // Called once the pool handed [a, a + size) to stream s: every hazard inside must be safe.
  void allocated(std::uintptr_t a, std::size_t size, stream_handle s) {
    std::lock_guard lock(mu_);
    auto it = hazards_.lower_bound(a);
    if (it != hazards_.begin()) --it;
    std::vector<std::uintptr_t> inside; // starts of the hazards overlapping [a, a + size)
    for (; it != hazards_.end() && it->first < a + size; ++it)
      if (it->first + it->second.size > a) inside.push_back(it->first);
    for (const std::uintptr_t start : inside) {
      const freed h = hazards_.at(start);
      bool safe = fe_.fenced_since(h.at);
      if (h.stream != k_no_stream)
        safe = safe || (h.stream == s && !h.destroyed) || fe_.completed_since(h.stream, h.at) ||
               (s != k_no_stream && fe_.waited_since(s, h.stream, h.at));
      if (!safe) ++violations;
      // The new owner's work now follows the old; keep the parts outside the new block.
      hazards_.erase(start);
      if (start < a) hazards_[start] = freed{a - start, h.stream, h.at, h.destroyed};
      if (start + h.size > a + size)
        hazards_[a + size] = freed{start + h.size - a - size, h.stream, h.at, h.destroyed};
    }
  }
  // cuStreamDestroy(s): a stream created later may get the handle, and s's work may still run,
  // so a later allocation on "s" is another stream: s's frees are not its own.
  void stream_destroyed(stream_handle s) {
    std::lock_guard lock(mu_);
    for (auto& [start, h] : hazards_)
      if (h.stream == s) h.destroyed = true;
  }
  std::size_t violations = 0;

private:
  fake_fences& fe_;
  std::mutex mu_;
  std::map<std::uintptr_t, freed> hazards_;
};

// Segments, the arena, and the arena with barriers and marks (pool_options::marks): slow
// barriers make the threads contend for fences, so marks are recorded and used.
TEST(concurrent_hazard, seals_waits_and_fences_never_hand_out_a_block_early) {
  for (const int variant : {0, 1, 2}) {
    const bool arena = variant != 0, marks = variant == 2;
    fake_upstream up;
    up.page = arena ? 2 * k_mib : 0;
    fake_fences fe;
    fe.record_yields = 20; // frees on the shared stream race with seals in flight
    if (marks)
      fe.before_barrier = [] {
        for (int i = 0; i < 50; ++i)
          std::this_thread::yield();
      };
    pool_options o;
    o.arena = arena;
    o.barriers = o.marks = marks;
    o.limit_bytes = 96 * k_mib; // blocks keep moving between streams
    hazard_table table(fe);
    std::atomic<std::size_t> allocs{0};
    {
      pool p(up, fe, o);
      event_completer completer(fe, 99);
      std::vector<std::thread> threads;
      for (int id = 0; id < k_threads; ++id)
        threads.emplace_back([&, id] {
          std::mt19937_64 rng(static_cast<std::uint64_t>(id) * 104729 + 7);
          const stream_handle own = 0x1000 + static_cast<stream_handle>(id);
          std::vector<std::pair<std::uintptr_t, std::size_t>> mine;
          auto pick = [&] {
            const unsigned k = static_cast<unsigned>(rng() % 8);
            return k < 5 ? own : k < 7 ? k_shared : k_no_stream;
          };
          for (int i = 0; i < k_ops_per_thread; ++i) {
            if ((rng() % 2 == 0 && mine.size() < 24) || mine.empty()) {
              const std::size_t n =
                  rng() % 8 == 0 ? (1 + rng() % 6) * k_mib : 1 + rng() % (192 << 10);
              const stream_handle s = pick();
              const alloc_result r = p.allocate(n, s);
              if (r.status != pool_status::ok) continue; // the limit may refuse it
              table.allocated(r.address, r.size, s);
              mine.emplace_back(r.address, r.size);
              ++allocs;
            } else {
              const std::size_t k = rng() % mine.size();
              const stream_handle s = pick();
              table.freeing(mine[k].first, mine[k].second, s);
              EXPECT_EQ(p.deallocate(mine[k].first, s), pool_status::ok);
              mine[k] = mine.back();
              mine.pop_back();
            }
          }
          for (const auto& [a, n] : mine) {
            table.freeing(a, n, own);
            EXPECT_EQ(p.deallocate(a, own), pool_status::ok);
          }
        });
      for (auto& t : threads)
        t.join();
      completer.stop();
      EXPECT_TRUE(p.is_valid());
      EXPECT_EQ(p.stats().live_bytes, 0u);
      if (marks) {
        EXPECT_GT(p.slow_path().marks, 0u);
      }
    }
    EXPECT_EQ(table.violations, 0u) << (marks ? "marks" : arena ? "arena" : "segments");
    EXPECT_GT(allocs.load(), static_cast<std::size_t>(k_threads * k_ops_per_thread / 4));
    EXPECT_GT(fe.waits.size(), 0u); // blocks did move between streams through dependencies
    EXPECT_EQ(fe.bad_releases, 0u);
    EXPECT_EQ(fe.bad_uses, 0u);
    EXPECT_EQ(fe.live_events(), 0u); // every event released once
  }
}

// The threads' caches (pool/thread_cache.h) under the races they add: blocks freed by threads
// other than the one they were served to (through an exchange), streams destroyed and their
// handles used again at once, and the limit making the pool take cached blocks back.
TEST(concurrent_hazard, thread_caches_never_hand_out_a_block_early) {
  fake_upstream up;
  fake_fences fe;
  pool_options o;
  o.limit_bytes = 64 * k_mib;
  hazard_table table(fe);
  std::atomic<std::size_t> allocs{0}, handed_over{0};
  std::mutex exchange_mu;
  std::vector<std::pair<std::uintptr_t, std::size_t>> exchange; // freed by whoever takes them
  {
    pool p(up, fe, o);
    event_completer completer(fe, 7);
    std::vector<std::thread> threads;
    for (int id = 0; id < k_threads; ++id)
      threads.emplace_back([&, id] {
        std::mt19937_64 rng(static_cast<std::uint64_t>(id) * 7919 + 3);
        const stream_handle own = 0x2000 + static_cast<stream_handle>(id);
        std::vector<std::pair<std::uintptr_t, std::size_t>> mine;
        auto free_on_own = [&](std::uintptr_t a, std::size_t n) {
          table.freeing(a, n, own);
          EXPECT_EQ(p.deallocate(a, own), pool_status::ok);
        };
        for (int i = 0; i < k_ops_per_thread; ++i) {
          const unsigned k = static_cast<unsigned>(rng() % 16);
          if (k == 0) { // destroy the stream; the next one gets the same handle
            table.stream_destroyed(own);
            p.stream_destroying(own);
          } else if (k < 3) { // free a block another thread was served
            std::pair<std::uintptr_t, std::size_t> b{0, 0};
            {
              std::lock_guard lock(exchange_mu);
              if (!exchange.empty()) {
                b = exchange.back();
                exchange.pop_back();
              }
            }
            if (b.first != 0) free_on_own(b.first, b.second);
          } else if ((k < 10 && mine.size() < 16) || mine.empty()) {
            const std::size_t n = 1 + rng() % (rng() % 4 == 0 ? 3 * k_mib : 256 << 10);
            const alloc_result r = p.allocate(n, own);
            if (r.status != pool_status::ok) continue; // the limit may refuse it
            table.allocated(r.address, r.size, own);
            ++allocs;
            if (rng() % 4 == 0) {
              std::lock_guard lock(exchange_mu);
              exchange.emplace_back(r.address, r.size);
              ++handed_over;
            } else {
              mine.emplace_back(r.address, r.size);
            }
          } else {
            const std::size_t j = rng() % mine.size();
            free_on_own(mine[j].first, mine[j].second);
            mine[j] = mine.back();
            mine.pop_back();
          }
        }
        for (const auto& [a, n] : mine)
          free_on_own(a, n);
      });
    for (auto& t : threads)
      t.join();
    for (const auto& [a, n] : exchange) { // this thread's frees: the pool's path
      table.freeing(a, n, k_shared);
      EXPECT_EQ(p.deallocate(a, k_shared), pool_status::ok);
    }
    completer.stop();
    EXPECT_TRUE(p.is_valid());
    const pool_stats s = p.stats();
    EXPECT_EQ(s.live_bytes, 0u);
    EXPECT_EQ(s.live_blocks, 0u);
    EXPECT_EQ(s.total_allocs, allocs.load());
    EXPECT_EQ(s.total_frees, allocs.load());
    EXPECT_EQ(s.invalid_frees, 0u);
  }
  EXPECT_EQ(table.violations, 0u);
  EXPECT_GT(handed_over.load(), static_cast<std::size_t>(k_threads * k_ops_per_thread / 40));
  EXPECT_EQ(fe.bad_releases, 0u);
  EXPECT_EQ(fe.bad_uses, 0u);
  EXPECT_EQ(fe.live_events(), 0u);
}

// A pool held to one small segment (the limit stops growth), filled with blocks of k_block:
// every allocation past that needs a block freed earlier, through a seal or a fence.
struct full_pool : ::testing::Test {
  static constexpr std::size_t k_block = 64 * 1024;
  // Fills the segment with blocks allocated on s.
  void fill(stream_handle s = k_no_stream) {
    blocks = fill_segment(p, k_block, s);
    ASSERT_EQ(std::count(blocks.begin(), blocks.end(), 0u), 0);
  }
  fake_upstream up;
  fake_fences fe;
  pool p{up, fe, one_segment_options()};
  std::vector<std::uintptr_t> blocks;
};

// Threads that need a fence while another thread's runs share the next one (pool_impl::
// fence_now): a fence that began after a thread asked covers every block it waits for. A
// fills the pool to its limit, frees one block and allocates: its fence is held in
// synchronize. B and C free and ask meanwhile; once A's fence ends, one more fence serves both.
TEST_F(full_pool, threads_waiting_for_a_fence_share_the_next_one) {
  fill();
  first_call_gate gate;
  fe.before_synchronize = [&] { gate.pass(); };
  ASSERT_EQ(p.deallocate(blocks[0]), pool_status::ok); // pending
  std::uintptr_t got[3] = {};
  std::thread a([&] { got[0] = p.allocate(k_block).address; });
  while (gate.calls() == 0) // A is inside its fence
    std::this_thread::yield();
  ASSERT_EQ(p.deallocate(blocks[1]), pool_status::ok); // freed after A's fence began
  ASSERT_EQ(p.deallocate(blocks[2]), pool_status::ok);
  std::thread b([&] { got[1] = p.allocate(k_block).address; });
  std::thread c([&] { got[2] = p.allocate(k_block).address; });
  // B and C asked for a fence (fence_now counts a call before it waits for A's to end).
  while (p.slow_path().fence_calls < 3)
    std::this_thread::yield();
  gate.open();
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(gate.calls(), 2); // A's, and one for B and C
  for (std::uintptr_t x : got)
    EXPECT_NE(x, 0u);
  EXPECT_EQ(p.stats().reserved_bytes, p.options().small_segment_bytes);
  EXPECT_EQ(p.stats().pending_bytes, 0u);
  EXPECT_TRUE(p.is_valid());
}

// A stream being destroyed (pool::stream_destroying, called by the shim's cuStreamDestroy hook
// before the driver's) must not be touched by another thread's seal: the H200 crashed in
// cuEventRecord on a destroyed stream (stream_alloc_bench, 16 threads, 1 run in 6). The call
// waits for a record in progress on the stream.
TEST_F(full_pool, a_stream_being_destroyed_waits_for_a_seal_in_progress) {
  constexpr stream_handle k_s1 = 0x100, k_s2 = 0x200;
  fill(k_s1);
  std::atomic<bool> in_record{false}, release{false};
  fe.before_record = [&](stream_handle s) {
    if (s != k_s1 || in_record.exchange(true)) return;
    while (!release.load())
      std::this_thread::yield();
  };
  ASSERT_EQ(p.deallocate(blocks[0], k_s1), pool_status::ok); // x1: unsealed on S1
  std::uintptr_t got_b = 0;
  std::thread b([&] { got_b = p.allocate(k_block, k_s2).address; }); // seals S1
  while (!in_record.load())
    std::this_thread::yield();
  ASSERT_EQ(p.deallocate(blocks[1], k_s1), pool_status::ok); // x2: after B's seal began
  std::atomic<bool> destroying_returned{false};
  std::thread c([&] {
    p.stream_destroying(k_s1);
    destroying_returned.store(true);
  });
  // C saw the record in progress and waits (or returned without waiting: the bug).
  while (p.slow_path().destroy_waits == 0 && !destroying_returned.load())
    std::this_thread::yield();
  EXPECT_FALSE(destroying_returned.load()) << "returned while a record on the stream ran";
  release.store(true);
  b.join();
  c.join();
  EXPECT_NE(got_b, 0u);
  EXPECT_TRUE(p.is_valid());
}

// Once stream_destroying(S1) returned, seals pass S1 by: its unsealed block reaches another
// stream through a fence, with no event recorded on S1. A free on a stream with S1's handle (a
// new stream) makes it sealable again.
TEST_F(full_pool, seals_pass_a_stream_being_destroyed_by) {
  constexpr stream_handle k_s1 = 0x100, k_s2 = 0x200;
  fill(k_s1);
  ASSERT_EQ(p.deallocate(blocks[0], k_s1), pool_status::ok); // unsealed on S1
  p.stream_destroying(k_s1);
  const std::uint64_t fences = p.stats().fences;
  EXPECT_EQ(p.allocate(k_block, k_s2).address, blocks[0]);
  EXPECT_EQ(fe.records_on(k_s1), 0u);
  EXPECT_EQ(p.stats().fences, fences + 1);
  ASSERT_EQ(p.deallocate(blocks[1], k_s1), pool_status::ok);
  EXPECT_EQ(p.allocate(k_block, k_s2).address, blocks[1]);
  EXPECT_EQ(fe.records_on(k_s1), 1u); // sealed: S1 is a stream like any other again
  EXPECT_TRUE(p.is_valid());
}

// A stream's handle comes back after cuStreamDestroy (a new stream): the blocks freed on the
// old stream, which may still run, reach it only through a fence (no thread cache here).
TEST(stream_destroy, a_handle_used_again_gets_the_old_streams_blocks_after_a_fence) {
  constexpr stream_handle k_s1 = 0x100;
  fake_upstream up;
  fake_fences fe;
  pool_options o = one_segment_options();
  o.thread_caches = false;
  pool p(up, fe, o);
  const std::vector<std::uintptr_t> blocks = fill_segment(p, 64 << 10, k_s1);
  ASSERT_EQ(p.deallocate(blocks[5], k_s1), pool_status::ok);
  const std::uint64_t freed = fe.now();
  p.stream_destroying(k_s1);
  EXPECT_EQ(p.allocate(64 << 10, k_s1).address, blocks[5]);
  EXPECT_TRUE(fe.fenced_since(freed));
  EXPECT_TRUE(p.is_valid());
}

// A destroyed stream's frees keep their place in time: a fence begun after them (and before
// later stream-less frees) makes them safe, as it would have on the stream.
TEST(stream_destroy, a_fence_begun_after_the_old_streams_frees_covers_them) {
  constexpr stream_handle k_s1 = 0x100, k_s2 = 0x200;
  fake_upstream up;
  fake_fences fe;
  pool_options o = one_segment_options();
  o.thread_caches = false;
  pool p(up, fe, o);
  const std::vector<std::uintptr_t> blocks = fill_segment(p, 64 << 10, k_s1);
  ASSERT_EQ(p.deallocate(blocks[2], k_s1), pool_status::ok);
  const std::uint64_t ticket = p.begin_external_fence();
  ASSERT_EQ(p.deallocate(blocks[7]), pool_status::ok); // pending, after the fence began
  p.stream_destroying(k_s1);
  EXPECT_TRUE(p.is_valid()); // pending blocks in free order
  p.end_external_fence(ticket);
  const std::uint64_t fences = p.stats().fences;
  EXPECT_EQ(p.allocate(64 << 10, k_s2).address, blocks[2]);
  EXPECT_EQ(p.stats().fences, fences); // no other fence needed
  EXPECT_EQ(p.stats().pending_blocks, 1u);
  EXPECT_TRUE(p.is_valid());
}

} // namespace
} // namespace gmem::testing
