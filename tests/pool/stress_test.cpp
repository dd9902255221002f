// Eight threads allocating and freeing on their own streams, on no stream and across streams,
// with fences, stream syncs, trims, stats and range queries in between. A shared table checks
// that no two live blocks ever overlap; at the end the pool must be valid and its stats must
// add up. Meant to run clean under TSan (make test-tsan).
#include "pool/pool.h"
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <thread>

namespace gmem::testing {
namespace {

#if defined(GMEM_DEBUG)
constexpr int k_ops_per_thread = 500;
#elif defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
constexpr int k_ops_per_thread = 3'000;
#else
constexpr int k_ops_per_thread = 30'000;
#endif
constexpr int k_threads = 8;

class live_table {
public:
  void add(std::uintptr_t a, std::size_t size) {
    std::lock_guard lock(mu_);
    auto next = ranges_.lower_bound(a);
    if (next != ranges_.end() && a + size > next->first) ++overlaps;
    if (next != ranges_.begin() && std::prev(next)->first + std::prev(next)->second > a) ++overlaps;
    ranges_[a] = size;
  }
  void remove(std::uintptr_t a) {
    std::lock_guard lock(mu_);
    ranges_.erase(a);
  }
  std::size_t overlaps = 0;

private:
  std::mutex mu_;
  std::map<std::uintptr_t, std::size_t> ranges_;
};

void worker(pool& p, fake_fences& fe, live_table& table, int id, std::size_t& errors) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(id) * 7919 + 1);
  const stream_handle own = 0x1000 + static_cast<stream_handle>(id);
  std::vector<std::pair<std::uintptr_t, std::size_t>> mine;
  for (int i = 0; i < k_ops_per_thread; ++i) {
    unsigned op = static_cast<unsigned>(rng() % 100);
    if (op < 50 && mine.size() < 64) {
      std::size_t size = rng() % 8 == 0 ? (1 + rng() % 24) * k_mib : 1 + rng() % (256 << 10);
      stream_handle s = rng() % 4 == 0 ? k_no_stream : own;
      alloc_result r = p.allocate(size, s);
      if (r.status != pool_status::ok) continue; // the limit may refuse it
      table.add(r.address, r.size);
      mine.emplace_back(r.address, r.size);
    } else if (op < 92 && !mine.empty()) {
      std::size_t k = rng() % mine.size();
      auto [a, size] = mine[k];
      mine[k] = mine.back();
      mine.pop_back();
      table.remove(a); // before the pool may hand it out again
      stream_handle s = rng() % 3 == 0 ? k_no_stream : (rng() % 5 == 0 ? own + 1 : own);
      if (p.deallocate(a, s) != pool_status::ok) ++errors;
    } else if (op < 94) {
      std::uint64_t t = p.begin_external_fence();
      p.end_external_fence(t);
    } else if (op < 96) {
      p.end_stream_sync(own, p.begin_stream_sync());
    } else if (op < 97) {
      fe.complete_all();
    } else if (op < 98) {
      p.trim(rng() % 2 ? 0 : 32 * k_mib);
    } else {
      pool_stats s = p.stats();
      if (s.largest_free_block > s.free_bytes) ++errors;
      if (!mine.empty()) {
        auto info = p.find(mine[0].first + mine[0].second - 1);
        if (!info || info->address != mine[0].first) ++errors;
      }
    }
  }
  for (auto [a, size] : mine) {
    table.remove(a);
    if (p.deallocate(a, own) != pool_status::ok) ++errors;
  }
}

void stress(pool_options o) {
  fake_upstream up;
  fake_fences fe;
  std::size_t errors[k_threads] = {};
  live_table table;
  {
    pool p(up, fe, o);
    std::vector<std::thread> threads;
    for (int t = 0; t < k_threads; ++t)
      threads.emplace_back(worker, std::ref(p), std::ref(fe), std::ref(table), t,
                           std::ref(errors[t]));
    for (auto& t : threads)
      t.join();
    EXPECT_TRUE(p.is_valid());
    pool_stats s = p.stats();
    EXPECT_EQ(s.live_blocks, 0u);
    EXPECT_EQ(s.total_allocs, s.total_frees);
    EXPECT_EQ(s.reserved_bytes, up.mapped_bytes);
    if (o.limit_bytes != 0) {
      EXPECT_LE(up.peak_mapped_bytes, o.limit_bytes);
    }
  }
  for (std::size_t e : errors)
    EXPECT_EQ(e, 0u);
  EXPECT_EQ(table.overlaps, 0u);
  EXPECT_EQ(up.mapped.size(), 0u);
  EXPECT_EQ(up.bad_unmaps, 0u);
  EXPECT_EQ(fe.bad_releases, 0u);
  EXPECT_EQ(fe.bad_uses, 0u);
  EXPECT_EQ(fe.live_events(), 0u);
}

TEST(stress_test, eight_threads_default_policy) {
  stress(pool_options{});
}

TEST(stress_test, eight_threads_under_a_limit) {
  pool_options o;
  o.limit_bytes = 512 * k_mib;
  o.max_cached_bytes = 64 * k_mib;
  stress(o);
}

} // namespace
} // namespace gmem::testing
