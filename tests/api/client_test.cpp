// libgmem_client.so in-process, as the unit-test binary sees it: no shim and (on machines
// without a GPU) no driver, or whatever driver LD_LIBRARY_PATH offers. Checks the answers
// that hold either way, and that concurrent calls are safe (run under TSan by make test-tsan).
#include "gmem/gmem.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

namespace {

TEST(Client, NoShimInATestBinary) {
  EXPECT_EQ(gmem_available(), 0);
  EXPECT_EQ(gmem_mark("x"), GMEM_ERROR_NO_SHIM);
  EXPECT_EQ(gmem_reset_peak(), GMEM_ERROR_NO_SHIM);
  EXPECT_EQ(gmem_empty_cache(), GMEM_OK);
  EXPECT_STREQ(gmem_status_name(GMEM_ERROR_TRUNCATED), "GMEM_ERROR_TRUNCATED");
}

TEST(Client, ArgumentChecks) {
  EXPECT_EQ(gmem_stats(-1, nullptr), GMEM_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gmem_allocatable_bytes(-1, nullptr), GMEM_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gmem_memory_report(nullptr, 10), GMEM_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gmem_set_limit(1, -2), GMEM_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gmem_set_limit(1, 1000), GMEM_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gmem_mark(nullptr), GMEM_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(gmem_can_allocate(std::uint64_t{1} << 62, -1), 0);
}

TEST(Client, ReportAlwaysSaysWhereItsFiguresComeFrom) {
  char buf[4096];
  const gmem_status rc = gmem_memory_report(buf, sizeof buf);
  EXPECT_TRUE(rc == GMEM_OK || rc == GMEM_ERROR_NO_DRIVER) << gmem_status_name(rc);
  EXPECT_NE(std::strstr(buf, "libgmem.so not preloaded"), nullptr) << buf;
}

TEST(Client, ConcurrentCallsAgree) {
  gmem_stats_t first{};
  first.struct_size = sizeof first;
  const gmem_status expected = gmem_stats(-1, &first);
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        gmem_stats_t s{};
        s.struct_size = sizeof s;
        if (gmem_stats(-1, &s) != expected) ++mismatches;
        std::uint64_t a = 0;
        (void)gmem_allocatable_bytes(-1, &a);
        (void)gmem_set_limit(static_cast<std::uint64_t>(t + 1) << 20, t % 2 == 0 ? -1 : 0);
        char buf[512];
        (void)gmem_memory_report(buf, sizeof buf);
      }
    });
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(gmem_set_limit(0, -1), GMEM_OK);
}

} // namespace
