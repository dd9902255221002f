// Planning and the OOM retry logic of include/gmem/chunking.hpp, with out-of-memory injected
// by the chunk functions themselves (no driver, no device: availability is passed in).
#include "gmem/chunking.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace gmem {
namespace {

chunk_options with_available(std::uint64_t bytes) {
  chunk_options o;
  o.available_bytes = bytes;
  return o;
}

TEST(PlanChunks, UsesSafetyFractionOfAvailable) {
  // 1000 bytes available, 0.7 -> 700-byte budget, 10 bytes per item -> 70 items per chunk;
  // 1000 items -> 15 chunks, balanced to 67 items (last 62).
  const chunk_plan p = plan_chunks(1000, 10, with_available(1000));
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.budget_bytes, 700u);
  EXPECT_EQ(p.chunk_count, 15u);
  EXPECT_EQ(p.chunk_items, 67u);
  EXPECT_EQ(p.last_chunk_items, 1000u - 14u * 67u);
  EXPECT_EQ(p.bytes_per_chunk, 670u);
  EXPECT_LE(p.bytes_per_chunk, p.budget_bytes);
}

TEST(PlanChunks, EverythingFitsInOneChunk) {
  const chunk_plan p = plan_chunks(10, 10, with_available(1 << 20));
  EXPECT_EQ(p.chunk_count, 1u);
  EXPECT_EQ(p.chunk_items, 10u);
  EXPECT_EQ(p.last_chunk_items, 10u);
}

TEST(PlanChunks, MinMaxAndFixedBytes) {
  chunk_options o = with_available(1000);
  o.fixed_bytes = 300;                                 // budget 700 - 300 -> 40 items of 10 bytes
  EXPECT_EQ(plan_chunks(100, 10, o).chunk_items, 34u); // 3 chunks balanced: 34, 34, 32
  o.max_chunk_items = 8;
  EXPECT_EQ(plan_chunks(100, 10, o).chunk_items, 8u);
  o.max_chunk_items = 0;
  o.min_chunk_items = 50; // more than the budget allows
  const chunk_plan p = plan_chunks(100, 10, o);
  EXPECT_FALSE(p.fits);
  EXPECT_EQ(p.chunk_items, 50u);
  EXPECT_EQ(p.chunk_count, 2u);
}

TEST(PlanChunks, CustomSafetyFractionAndZeroItems) {
  chunk_options o = with_available(1000);
  o.safety_fraction = 0.5;
  EXPECT_EQ(plan_chunks(1000, 10, o).chunk_items, 50u);
  const chunk_plan empty = plan_chunks(0, 10, o);
  EXPECT_EQ(empty.chunk_count, 0u);
  EXPECT_EQ(empty.chunk_items, 0u);
}

TEST(PlanChunks, AlwaysCoversEverything) {
  for (std::size_t total : {1u, 7u, 99u, 1000u, 4097u})
    for (std::uint64_t avail : {1u, 100u, 999u, 100000u}) {
      const chunk_plan p = plan_chunks(total, 3, with_available(avail));
      ASSERT_GE(p.chunk_items, 1u);
      EXPECT_EQ((p.chunk_count - 1) * p.chunk_items + p.last_chunk_items, total);
      EXPECT_GE(p.last_chunk_items, 1u);
      EXPECT_LE(p.last_chunk_items, p.chunk_items);
    }
}

// Records which items were processed, so tests can check exact-once coverage.
struct coverage {
  std::vector<int> hits;
  explicit coverage(std::size_t n) : hits(n, 0) {}
  void mark(std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i)
      ++hits[i];
  }
  bool exactly_once() const {
    for (int h : hits)
      if (h != 1) return false;
    return true;
  }
};

retry_options counting_retry(int& empties) {
  retry_options r;
  r.empty_cache = [&empties] { ++empties; };
  return r;
}

TEST(ForEachChunk, NoOomRunsThePlan) {
  const chunk_plan p = plan_chunks(100, 10, with_available(350)); // 24 items -> 5 chunks of 20
  coverage c(100);
  int empties = 0;
  const chunk_result r = for_each_chunk(
      100, p, [&](std::size_t b, std::size_t e) { c.mark(b, e); }, counting_retry(empties));
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(c.exactly_once());
  EXPECT_EQ(r.chunks_run, p.chunk_count);
  EXPECT_EQ(r.ooms, 0u);
  EXPECT_EQ(empties, 0);
}

TEST(ForEachChunk, OomAboveThresholdHalvesUntilItFits) {
  // The "device" holds 13 items; the plan believed 100. Error codes like CUDA's.
  const chunk_plan p = plan_chunks(100, 1, with_available(1000));
  ASSERT_EQ(p.chunk_items, 100u);
  coverage c(100);
  int empties = 0;
  std::size_t largest_ok = 0;
  const chunk_result r = for_each_chunk(
      100, p,
      [&](std::size_t b, std::size_t e) -> int {
        if (e - b > 13) return k_cuda_out_of_memory;
        largest_ok = std::max(largest_ok, e - b);
        c.mark(b, e);
        return 0;
      },
      counting_retry(empties));
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(c.exactly_once());
  EXPECT_LE(largest_ok, 13u);
  EXPECT_GE(r.halvings, 3u); // 100 -> 50 -> 25 -> 12
  EXPECT_EQ(static_cast<std::size_t>(empties), r.halvings);
  EXPECT_EQ(r.items_done, 100u);
}

TEST(ForEachChunk, GrowsBackAfterConsecutiveSuccesses) {
  const chunk_plan p = plan_chunks(1000, 1, with_available(100000));
  coverage c(1000);
  bool squeezed = true; // OOM above 10 items for the first call only, then plenty of memory
  std::vector<std::size_t> sizes;
  retry_options o;
  o.empty_cache = [] {};
  o.grow_after = 2;
  const chunk_result r = for_each_chunk(
      1000, p,
      [&](std::size_t b, std::size_t e) {
        if (squeezed && e - b > 10) throw out_of_memory();
        squeezed = false;
        sizes.push_back(e - b);
        c.mark(b, e);
      },
      o);
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(c.exactly_once());
  EXPECT_GE(r.growths, 2u);
  ASSERT_GE(sizes.size(), 3u);
  EXPECT_GT(sizes.back(), sizes.front()); // grew back
}

TEST(ForEachChunk, IntermittentOomStillCoversEverythingOnce) {
  const chunk_plan p = plan_chunks(500, 1, with_available(64 * 10 / 7 + 1));
  coverage c(500);
  unsigned calls = 0;
  int empties = 0;
  retry_options o = counting_retry(empties);
  o.grow_after = 2;
  const chunk_result r = for_each_chunk(
      500, p,
      [&](std::size_t b, std::size_t e) -> int {
        if (++calls % 3 == 0) return k_cuda_out_of_memory; // every third call fails
        c.mark(b, e);
        return 0;
      },
      o);
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(c.exactly_once());
  EXPECT_GT(r.ooms, 0u);
}

TEST(ForEachChunk, OomAtSizeOneReportsTheFailingRange) {
  const chunk_plan p = plan_chunks(64, 1, with_available(1000));
  coverage c(64);
  int empties = 0;
  const chunk_result r = for_each_chunk(
      64, p,
      [&](std::size_t b, std::size_t e) -> int {
        if (b <= 37 && 37 < e) return k_cuda_out_of_memory; // item 37 never fits
        c.mark(b, e);
        return 0;
      },
      counting_retry(empties));
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.error, chunk_error::out_of_memory_at_minimum);
  EXPECT_EQ(r.failed_begin, 37u);
  EXPECT_EQ(r.failed_end, 38u);
  EXPECT_NE(r.message.find("[37, 38)"), std::string::npos) << r.message;
  EXPECT_EQ(r.items_done, 37u); // everything before it, each once
  for (std::size_t i = 0; i < 37; ++i)
    EXPECT_EQ(c.hits[i], 1);
}

TEST(ForEachChunk, BoundedHalvings) {
  const chunk_plan p = plan_chunks(1u << 20, 1, with_available(1u << 30));
  retry_options o;
  o.empty_cache = [] {};
  o.max_halvings = 3;
  const chunk_result r = for_each_chunk(
      1u << 20, p, [](std::size_t, std::size_t) { return 2; }, o);
  EXPECT_EQ(r.error, chunk_error::too_many_halvings);
  EXPECT_EQ(r.halvings, 3u);
  EXPECT_EQ(r.failed_end - r.failed_begin, (1u << 20) / 8);
}

TEST(ForEachChunk, NonOomErrorStopsWithItsCode) {
  const chunk_plan p = plan_chunks(10, 1, with_available(4)); // chunks of 2
  const chunk_result r =
      for_each_chunk(10, p, [](std::size_t b, std::size_t) { return b == 4 ? 700 : 0; });
  EXPECT_EQ(r.error, chunk_error::failed);
  EXPECT_EQ(r.code, 700);
  EXPECT_EQ(r.failed_begin, 4u);
  EXPECT_EQ(r.items_done, 4u);
}

TEST(ForEachChunk, CallerPredicateAndForeignExceptions) {
  const chunk_plan p = plan_chunks(8, 1, with_available(1000));
  retry_options o;
  o.empty_cache = [] {};
  o.is_oom_code = [](long long c) { return c == 99; };
  coverage c(8);
  const chunk_result r = for_each_chunk(
      8, p,
      [&](std::size_t b, std::size_t e) -> int {
        if (e - b > 2) return 99;
        c.mark(b, e);
        return 0;
      },
      o);
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(c.exactly_once());
  // A message saying "out of memory" counts as OOM (c10::OutOfMemoryError); others propagate.
  EXPECT_THROW(for_each_chunk(
                   8, p, [](std::size_t, std::size_t) { throw std::logic_error("bug"); }, o),
               std::logic_error);
  int n = 0;
  const chunk_result r2 = for_each_chunk(
      8, p,
      [&](std::size_t b, std::size_t e) {
        if (e - b > 4) throw std::runtime_error("CUDA out of memory. Tried to allocate 2 GiB");
        n += static_cast<int>(e - b);
      },
      o);
  EXPECT_TRUE(r2.ok());
  EXPECT_EQ(n, 8);
}

TEST(ForEachChunk, ProgressCallback) {
  const chunk_plan p = plan_chunks(10, 1, with_available(5)); // budget 3 -> chunks of 3,3,3,1
  std::vector<chunk_progress> seen;
  retry_options o;
  o.on_progress = [&](const chunk_progress& pr) { seen.push_back(pr); };
  const chunk_result r = for_each_chunk(
      10, p, [](std::size_t, std::size_t) {}, o);
  EXPECT_TRUE(r.ok());
  ASSERT_EQ(seen.size(), p.chunk_count);
  EXPECT_EQ(seen.back().items_done, 10u);
  EXPECT_EQ(seen.back().total_items, 10u);
  EXPECT_EQ(seen.back().end, 10u);
}

} // namespace
} // namespace gmem

namespace gmem {
namespace {

TEST(ForEachChunk, HalvingStopsAtMinChunkItems) {
  chunk_options o = with_available(1000);
  o.min_chunk_items = 4;
  const chunk_plan p = plan_chunks(64, 1, o);
  int empties = 0;
  const chunk_result r = for_each_chunk(
      64, p, [](std::size_t b, std::size_t e) { return b <= 21 && 21 < e ? 2 : 0; },
      counting_retry(empties));
  EXPECT_EQ(r.error, chunk_error::out_of_memory_at_minimum);
  EXPECT_EQ(r.failed_end - r.failed_begin, 4u); // never below the minimum
  EXPECT_LE(r.failed_begin, 21u);
  EXPECT_GT(r.failed_end, 21u);
}

TEST(ForEachChunk, EmptyCacheCanBeTurnedOff) {
  const chunk_plan p = plan_chunks(32, 1, with_available(1000));
  int empties = 0;
  retry_options o = counting_retry(empties);
  o.empty_cache_on_oom = false;
  const chunk_result r = for_each_chunk(
      32, p, [](std::size_t b, std::size_t e) { return e - b > 8 ? 2 : 0; }, o);
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_GT(r.halvings, 0u);
  EXPECT_EQ(empties, 0);
}

} // namespace
} // namespace gmem
