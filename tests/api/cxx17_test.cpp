// The public headers in C++17 (nvcc's default dialect): this file is compiled with -std=c++17
// (include/include.mk), so it fails to build if gmem.h or chunking.hpp needs C++20 again, and it
// checks that gmem::span, the C++17 stand-in for std::span, gives batches their items.
#include "gmem/chunking.hpp"
#include "gmem/gmem.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

static_assert(__cplusplus < 202002L, "cxx17_test.cpp must be compiled as C++17");

namespace gmem {
namespace {

chunk_options with_available(std::uint64_t bytes) {
  chunk_options o;
  o.available_bytes = bytes;
  return o;
}

TEST(Cxx17Headers, ForEachBatchPassesEveryItemOnceThroughSpan) {
  std::vector<int> input(1000);
  std::iota(input.begin(), input.end(), 0);
  std::vector<int> seen;
  std::size_t calls = 0;
  // 100 bytes per item, 10 KiB available -> 71 items per batch.
  const chunk_result r = for_each_batch(
      input.begin(), input.end(), std::uint64_t{100},
      [&](span<const int> items, std::size_t first_index) {
        EXPECT_EQ(first_index, seen.size());
        EXPECT_FALSE(items.empty());
        EXPECT_EQ(items.front(), static_cast<int>(first_index));
        EXPECT_EQ(items.back(), static_cast<int>(first_index + items.size() - 1));
        EXPECT_EQ(items[0], *items.data());
        for (int v : items)
          seen.push_back(v);
        ++calls;
      },
      with_available(10240));
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(seen, input);
  EXPECT_EQ(calls, (1000u + 70u) / 71u);
}

TEST(Cxx17Headers, ForEachBatchWithPerItemCostRetriesOnOom) {
  std::vector<std::uint64_t> input(64, 8);
  std::size_t done = 0;
  bool failed_once = false;
  const chunk_result r = for_each_batch(
      input.begin(), input.end(), [](const std::uint64_t& v) { return v; },
      [&](span<const std::uint64_t> items, std::size_t) -> int {
        if (!failed_once && items.size() > 1) {
          failed_once = true;
          return k_cuda_out_of_memory;
        }
        done += items.size();
        return 0;
      },
      with_available(1 << 20));
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_TRUE(failed_once);
  EXPECT_EQ(done, 64u);
  EXPECT_GE(r.ooms, 1u);
}

TEST(Cxx17Headers, PlanAndForEachChunk) {
  const chunk_plan p = plan_chunks(100, 1000, with_available(10000));
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(p.chunk_items, 7u);
  std::size_t covered = 0;
  const chunk_result r = for_each_chunk(100, p, [&](std::size_t b, std::size_t e) {
    EXPECT_EQ(b, covered);
    covered = e;
  });
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(covered, 100u);
}

} // namespace
} // namespace gmem
