// for_each_batch over inputs of unknown length: exact-once, in-order coverage, bounded
// buffering (the input is never materialized), cost estimation from a sample, OOM retries.
#include "gmem/chunking.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <iterator>
#include <vector>

namespace gmem {
namespace {

// A generator: yields 0, 1, ... n-1 and counts how many items it has produced, so a test can
// compare that with what the consumer has seen. The algorithm only sees an input iterator
// and a sentinel; it cannot know n.
struct generator_state {
  std::size_t n = 0;
  std::size_t produced = 0;
};

class generator_iterator {
public:
  using iterator_category = std::input_iterator_tag;
  using value_type = std::uint64_t;
  using difference_type = std::ptrdiff_t;
  using pointer = const value_type*;
  using reference = value_type;

  generator_iterator() = default;
  explicit generator_iterator(generator_state* s) : s_(s) {}
  value_type operator*() const { return s_->produced; }
  generator_iterator& operator++() {
    ++s_->produced;
    return *this;
  }
  void operator++(int) { ++*this; }
  friend bool operator==(const generator_iterator& it, std::default_sentinel_t) {
    return it.s_->produced >= it.s_->n;
  }

private:
  generator_state* s_ = nullptr;
};

chunk_options with_available(std::uint64_t bytes) {
  chunk_options o;
  o.available_bytes = bytes;
  return o;
}

TEST(ForEachBatch, UnknownLengthCoveredInOrderWithBoundedBuffer) {
  generator_state g{10000};
  std::uint64_t expect = 0;
  std::size_t max_ahead = 0, calls = 0;
  // 100 bytes per item, 10 KiB available -> budget 7168 -> 71 items per batch.
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel, std::uint64_t{100},
      [&](std::span<const std::uint64_t> items, std::size_t first_index) {
        EXPECT_EQ(first_index, expect);
        for (std::uint64_t v : items)
          EXPECT_EQ(v, expect++);
        max_ahead = std::max(max_ahead, g.produced - static_cast<std::size_t>(expect));
        ++calls;
      },
      with_available(10240));
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(expect, 10000u);
  EXPECT_EQ(r.items_done, 10000u);
  EXPECT_LE(max_ahead, 71u); // never more than one batch read ahead
  EXPECT_GE(calls, 10000u / 71u);
}

TEST(ForEachBatch, EstimatesCostFromTheSample) {
  generator_state g{1000};
  std::size_t largest = 0;
  stream_options so;
  so.sample_items = 8;
  // Each item costs 1000 bytes; 100 KB available -> 70 items per batch.
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel,
      [](std::uint64_t) { return std::uint64_t{1000}; },
      [&](std::span<const std::uint64_t> items, std::size_t) {
        largest = std::max(largest, items.size());
      },
      with_available(100000), {}, so);
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.items_done, 1000u);
  EXPECT_EQ(largest, 70u);
}

TEST(ForEachBatch, LaterCostlierItemsShrinkTheBatch) {
  generator_state g{2000};
  std::size_t last_size = 0;
  // Items from 1000 on cost 10x: the running maximum re-plans smaller batches.
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel,
      [](std::uint64_t v) { return std::uint64_t{v < 1000 ? 10u : 100u}; },
      [&](std::span<const std::uint64_t> items, std::size_t first) {
        if (first > 1200) last_size = std::max(last_size, items.size());
      },
      with_available(10000));
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.items_done, 2000u);
  EXPECT_LE(last_size, 70u);
  EXPECT_GT(last_size, 0u);
}

TEST(ForEachBatch, OomRetriesWithinTheBuffer) {
  generator_state g{777};
  std::uint64_t expect = 0;
  retry_options o;
  o.empty_cache = [] {};
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel, std::uint64_t{1},
      [&](std::span<const std::uint64_t> items, std::size_t) -> int {
        if (items.size() > 20) return k_cuda_out_of_memory; // the device holds 20 items
        for (std::uint64_t v : items)
          EXPECT_EQ(v, expect++);
        return 0;
      },
      with_available(1000), o);
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(expect, 777u);
  EXPECT_GT(r.halvings, 0u);
}

TEST(ForEachBatch, OomAtSizeOneReportsTheAbsoluteRange) {
  generator_state g{300};
  retry_options o;
  o.empty_cache = [] {};
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel, std::uint64_t{1},
      [&](std::span<const std::uint64_t> items, std::size_t) -> int {
        for (std::uint64_t v : items)
          if (v == 250) return k_cuda_out_of_memory;
        return 0;
      },
      with_available(100), o); // batches of 70
  EXPECT_EQ(r.error, chunk_error::out_of_memory_at_minimum);
  EXPECT_EQ(r.failed_begin, 250u);
  EXPECT_EQ(r.failed_end, 251u);
  EXPECT_EQ(r.items_done, 250u);
}

TEST(ForEachBatch, HostBatchCap) {
  generator_state g{5000};
  std::size_t largest = 0;
  stream_options so;
  so.max_batch_items = 100; // the device could take everything at once
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel, std::uint64_t{1},
      [&](std::span<const std::uint64_t> items, std::size_t) {
        largest = std::max(largest, items.size());
      },
      with_available(1u << 30), {}, so);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.items_done, 5000u);
  EXPECT_EQ(largest, 100u);
}

// A fake device for gmem::measured: each batch holds 1000 bytes per item while it runs.
struct fake_usage {
  std::uint64_t live = 5000; // someone else's memory, not to be counted
  std::uint64_t peak = 5000;
  stream_options options() {
    stream_options so;
    so.sample_items = 16;
    so.read_usage = [this](std::uint64_t& l, std::uint64_t& p) {
      l = live;
      p = peak;
      return true;
    };
    so.reset_peak = [this] {
      peak = live;
      return true;
    };
    return so;
  }
  void run_batch(std::size_t n) { peak = std::max(peak, live + n * 1000); }
};

TEST(ForEachBatch, MeasuredCostFromTheSample) {
  generator_state g{3000};
  fake_usage dev;
  std::uint64_t expect = 0;
  std::size_t largest_after_sample = 0;
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel, measured,
      [&](std::span<const std::uint64_t> items, std::size_t first) {
        EXPECT_EQ(first, expect);
        for (std::uint64_t v : items)
          EXPECT_EQ(v, expect++);
        dev.run_batch(items.size());
        if (first >= 16) largest_after_sample = std::max(largest_after_sample, items.size());
      },
      with_available(100000), {}, dev.options());
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(r.items_done, 3000u);
  EXPECT_EQ(largest_after_sample, 70u); // 1000 bytes per item measured; 70000-byte budget
  EXPECT_EQ(r.bytes_per_item, 1000u);
}

TEST(ForEachBatch, MeasuredCostAfterAnOomInTheSample) {
  generator_state g{500};
  fake_usage dev;
  retry_options o;
  o.empty_cache = [] {};
  std::size_t largest_after_sample = 0, items_seen = 0;
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel, measured,
      [&](std::span<const std::uint64_t> items, std::size_t first) -> int {
        if (first < 16 && items.size() > 4) return k_cuda_out_of_memory;
        dev.run_batch(items.size());
        items_seen += items.size();
        if (first >= 16) largest_after_sample = std::max(largest_after_sample, items.size());
        return 0;
      },
      with_available(50000), o, dev.options());
  EXPECT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(items_seen, 500u);
  EXPECT_GT(r.ooms, 0u);
  EXPECT_EQ(largest_after_sample, 35u); // still 1000 bytes per item, from 4-item chunks
}

TEST(ForEachBatch, UnmeasurableCostFallsBackToCaps) {
  generator_state g{1000};
  stream_options so;
  so.reset_peak = [] { return false; }; // no shim
  so.max_batch_items = 50;
  std::size_t largest = 0;
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel, measured,
      [&](std::span<const std::uint64_t> items, std::size_t) {
        largest = std::max(largest, items.size());
      },
      with_available(1000), {}, so);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.items_done, 1000u);
  EXPECT_LE(largest, 50u);
}

TEST(ForEachBatch, EmptyInput) {
  generator_state g{0};
  int calls = 0;
  const chunk_result r = for_each_batch(
      generator_iterator(&g), std::default_sentinel, std::uint64_t{8},
      [&](std::span<const std::uint64_t>, std::size_t) { ++calls; }, with_available(100));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(r.items_done, 0u);
}

TEST(ForEachBatch, WorksOverAVectorToo) {
  std::vector<int> v(123, 1);
  long long sum = 0;
  const chunk_result r = for_each_batch(
      v.begin(), v.end(), std::uint64_t{4},
      [&](std::span<const int> items, std::size_t) {
        for (int x : items)
          sum += x;
      },
      with_available(100));
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(sum, 123);
}

} // namespace
} // namespace gmem
