// The C ABI's contracts that need no driver: gmem_stats_t mirrors the pool's stats list,
// the struct growth rule, status names, and the memory report's recommendations.
#include "client/abi.h"
#include "client/memory_report.h"
#include "gmem/gmem.h"
#include "pool/stats.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

namespace gmem::client {
namespace {

TEST(Abi, StatsStructMirrorsThePoolList) {
  std::vector<std::string> pool_names, api_names;
#define POOL_NAME(n, d) pool_names.push_back(#n);
  GMEM_POOL_STATS(POOL_NAME)
#undef POOL_NAME
#define API_NAME(n) api_names.push_back(#n);
  GMEM_STATS_FIELDS(API_NAME)
#undef API_NAME
  // A counter added to pool/stats.h must be appended to GMEM_STATS_FIELDS (include/gmem/gmem.h)
  // and to python/gmem/_binding.py's STATS_FIELDS in the same order.
  EXPECT_EQ(api_names, pool_names);
  EXPECT_EQ(sizeof(gmem_stats_t),
            offsetof(gmem_stats_t, live_bytes) + api_names.size() * sizeof(std::uint64_t));
}

TEST(Abi, GrowthRuleFillsOnlyWhatTheCallerHas) {
  gmem_stats_t src{};
  src.device = 3;
  src.flags = GMEM_STATS_FROM_POOL;
  src.live_bytes = 111;
  src.invalid_frees = 7;

  gmem_stats_t full{};
  full.struct_size = sizeof full;
  ASSERT_EQ(copy_stats(src, &full), GMEM_OK);
  EXPECT_EQ(full.struct_size, sizeof full);
  EXPECT_EQ(full.version, static_cast<std::uint32_t>(GMEM_STATS_VERSION));
  EXPECT_EQ(full.live_bytes, 111u);
  EXPECT_EQ(full.invalid_frees, 7u);

  // An older caller that knew the fields up to live_bytes only.
  gmem_stats_t old{};
  old.struct_size = static_cast<std::uint32_t>(offsetof(gmem_stats_t, live_requested_bytes));
  old.invalid_frees = 99; // past its end: must stay untouched
  ASSERT_EQ(copy_stats(src, &old), GMEM_OK);
  EXPECT_EQ(old.live_bytes, 111u);
  EXPECT_EQ(old.device, 3);
  EXPECT_EQ(old.invalid_frees, 99u);
  EXPECT_EQ(old.struct_size, offsetof(gmem_stats_t, live_requested_bytes));

  gmem_stats_t tiny{};
  tiny.struct_size = 8;
  EXPECT_EQ(copy_stats(src, &tiny), GMEM_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(copy_stats(src, nullptr), GMEM_ERROR_INVALID_ARGUMENT);
}

TEST(Abi, StatusNames) {
  EXPECT_STREQ(status_name(GMEM_OK), "GMEM_OK");
  EXPECT_STREQ(status_name(GMEM_ERROR_NO_SHIM), "GMEM_ERROR_NO_SHIM");
  EXPECT_STREQ(status_name(static_cast<gmem_status>(6 + 1)), "GMEM_ERROR_UNKNOWN");
}

gmem_stats_t healthy() {
  gmem_stats_t s{};
  s.device = 0;
  s.device_total_bytes = 80ull << 30;
  s.device_free_bytes = 60ull << 30;
  s.reserved_bytes = 10ull << 30;
  s.live_bytes = 9ull << 30;
  s.peak_reserved_bytes = 10ull << 30;
  s.free_bytes = 1ull << 30;
  s.largest_free_block = 1ull << 30;
  s.total_allocs = 5000;
  s.cache_hits = 4900;
  return s;
}

TEST(MemoryReport, HealthyPoolHasNoRecommendations) {
  EXPECT_TRUE(recommendations(healthy(), true).empty());
  const std::string r = memory_report({{healthy(), "simulated device"}}, true);
  EXPECT_NE(r.find("device 0: simulated device"), std::string::npos) << r;
  EXPECT_NE(r.find("no threshold crossed"), std::string::npos) << r;
  EXPECT_NE(r.find("cache hit rate 98.0%"), std::string::npos) << r;
}

TEST(MemoryReport, EachThresholdFiresAndStatesItself) {
  gmem_stats_t s = healthy();
  s.largest_free_block = 100ull << 20; // 1 GiB free in pieces: 90% fragmentation
  s.cache_hits = 1000;                 // 20% hit rate over 5000
  s.limit_bytes = 10ull << 30;         // peak reserved == limit
  s.ooms = 2;
  s.pending_bytes = 2ull << 30;
  const auto recs = recommendations(s, true);
  std::string all;
  for (const auto& r : recs)
    all += r + "\n";
  EXPECT_NE(all.find("fragmentation 90.2% (threshold 30.0%"), std::string::npos) << all;
  EXPECT_NE(all.find("cache hit rate 20.0% (threshold 50.0%"), std::string::npos) << all;
  EXPECT_NE(all.find("of the limit (threshold 90.0%)"), std::string::npos) << all;
  EXPECT_NE(all.find("2 out-of-memory"), std::string::npos) << all;
  EXPECT_NE(all.find("pending frees 2.00 GiB"), std::string::npos) << all;
  EXPECT_NE(all.find("cached but unused"), std::string::npos) << all;
}

TEST(MemoryReport, WithoutTheShimSaysSo) {
  const std::string r = memory_report({{healthy(), ""}}, false);
  EXPECT_NE(r.find("libgmem.so not preloaded"), std::string::npos) << r;
  EXPECT_EQ(r.find("pool reserved"), std::string::npos) << r;
}

TEST(MemoryReport, CopyTruncatesAndTerminates) {
  char buf[8];
  EXPECT_EQ(copy_report("0123456789", buf, sizeof buf), GMEM_ERROR_TRUNCATED);
  EXPECT_STREQ(buf, "0123456");
  EXPECT_EQ(copy_report("abc", buf, sizeof buf), GMEM_OK);
  EXPECT_STREQ(buf, "abc");
  EXPECT_EQ(copy_report("abc", buf, 0), GMEM_ERROR_INVALID_ARGUMENT);
}

} // namespace
} // namespace gmem::client
