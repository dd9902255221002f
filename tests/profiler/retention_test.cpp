// The retention plan (trace_reader.h): which traces of ended processes stay in /dev/shm.
#include <gtest/gtest.h>

#include "profiler/reader/retention.h"
#include "profiler/reader/trace_listing.h"

namespace gmem::trace {
namespace {

constexpr std::uint64_t k_s = 1'000'000'000ull;
constexpr std::uint64_t k_now = 1'800'000'000ull * k_s;

trace_entry ended(const char* name, std::uint64_t ago_s, std::uint64_t mib) {
  trace_entry e;
  e.name = name;
  e.readable = true;
  e.state = trace_state::exited;
  e.exit_realtime_ns = k_now - ago_s * k_s;
  e.allocated_bytes = mib << 20;
  return e;
}

retention_policy policy(const char* max, const char* free_space, std::uint64_t age_s) {
  retention_policy p;
  p.keep_max = *parse_size_or_percent(max);
  p.keep_free = *parse_size_or_percent(free_space);
  p.keep_age_ns = age_s * k_s;
  return p;
}

TEST(retention, running_traces_are_never_removed) {
  trace_entry running = ended("a", 999'999, 500);
  running.state = trace_state::running;
  const auto plan = plan_retention({running}, policy("1M", "99%", 1), {1 << 30, 1 << 20}, k_now);
  EXPECT_FALSE(plan[0].evict);
  EXPECT_EQ(plan[0].reason, "running");
}

TEST(retention, oldest_go_first_until_within_the_size_budget) {
  const std::vector<trace_entry> e = {ended("new", 10, 40), ended("oldest", 300, 40),
                                      ended("middle", 100, 40)};
  const auto plan = plan_retention(e, policy("100M", "0", 0), {1ull << 40, 1ull << 39}, k_now);
  EXPECT_FALSE(plan[0].evict);
  EXPECT_TRUE(plan[1].evict); // 120 MiB > 100 MiB: the oldest goes, 80 MiB stay
  EXPECT_FALSE(plan[2].evict);
  EXPECT_NE(plan[1].reason.find("GMEM_TRACE_KEEP_MAX"), std::string::npos) << plan[1].reason;
  EXPECT_NE(plan[0].reason.find("kept: exited 10.0 s ago"), std::string::npos) << plan[0].reason;
}

TEST(retention, age_and_free_space) {
  const std::vector<trace_entry> e = {ended("week", 7 * 86400, 1), ended("hour", 3600, 30),
                                      ended("minute", 60, 30)};
  // 1 GiB file system with 10 MiB free; 5% (51 MiB) must stay free: the week-old one goes by
  // age, then the hour-old one to free space; the minute-old one is then enough.
  const auto plan = plan_retention(e, policy("100%", "5%", 86400), {1 << 30, 10 << 20}, k_now);
  EXPECT_TRUE(plan[0].evict);
  EXPECT_NE(plan[0].reason.find("longer than GMEM_TRACE_KEEP_AGE"), std::string::npos);
  EXPECT_TRUE(plan[1].evict);
  EXPECT_NE(plan[1].reason.find("GMEM_TRACE_KEEP_FREE"), std::string::npos) << plan[1].reason;
  EXPECT_TRUE(plan[2].evict); // 10 + 1 + 30 = 41 MiB free is still under 51 MiB
  const auto lenient = plan_retention(e, policy("100%", "0.5%", 0), {1 << 30, 10 << 20}, k_now);
  for (const auto& d : lenient)
    EXPECT_FALSE(d.evict) << d.reason;
}

TEST(retention, unreadable_traces_age_by_their_last_change) {
  trace_entry other;
  other.name = "gmem.1.2";
  other.readable = false;
  other.state = trace_state::crashed;
  other.mtime_ns = k_now - 10 * 86400 * k_s;
  other.allocated_bytes = 1 << 20;
  const auto plan = plan_retention({other}, policy("100%", "0", 86400), {1 << 30, 1 << 29}, k_now);
  EXPECT_TRUE(plan[0].evict);
}

// A time in the future (the header's or the mtime, set by the object's owner) is not believed:
// the trace is not the newest but ranks as the oldest, and it does not age.
TEST(retention, future_times_rank_oldest_and_do_not_age) {
  trace_entry future = ended("future", 0, 40);
  future.exit_realtime_ns = k_now + 4 * 365 * 86400 * k_s; // "2030"
  const std::vector<trace_entry> e = {future, ended("fresh", 5, 40), ended("old", 600, 40)};
  const auto by_age = plan_retention(e, policy("1G", "0", 3600), {1ull << 40, 1ull << 39}, k_now);
  EXPECT_FALSE(by_age[0].evict) << by_age[0].reason; // not aged out
  EXPECT_FALSE(by_age[1].evict) << by_age[1].reason;
  EXPECT_FALSE(by_age[2].evict) << by_age[2].reason;
  // 120 MiB over a 40 MiB budget: the forged one goes first, then the oldest real one.
  const auto tight = plan_retention(e, policy("40M", "0", 0), {1ull << 40, 1ull << 39}, k_now);
  EXPECT_TRUE(tight[0].evict) << tight[0].reason;
  EXPECT_FALSE(tight[1].evict) << tight[1].reason;
  EXPECT_TRUE(tight[2].evict) << tight[2].reason;
}

// One user's objects, however many and whatever times they claim, never make another user's
// traces "removed": each owner's objects are planned apart, /dev/shm measured as if only
// theirs were in it.
TEST(retention, each_owner_is_planned_apart) {
  std::vector<trace_entry> e;
  for (int i = 0; i < 10; ++i) {
    trace_entry forged = ended("forged", 1, 100); // 1000 MiB, newer than any of the victim's
    forged.uid = 65534;
    forged.owner_known = true;
    e.push_back(forged);
  }
  for (std::uint64_t ago : {5, 60, 600}) {
    trace_entry victim = ended("victim", ago, 10);
    victim.uid = 1000;
    victim.owner_known = true;
    e.push_back(victim);
  }
  trace_entry unknown = ended("unknown", 10 * 86400, 1);
  e.push_back(unknown);
  // 2 GiB /dev/shm, 10% = 204 MiB of kept traces, 15% free.
  const auto plan = plan_retention_by_owner(e, policy("10%", "15%", 3 * 86400), 2ull << 30, k_now);
  for (std::size_t i = 10; i < 13; ++i)
    EXPECT_FALSE(plan[i].evict) << i << ": " << plan[i].reason;
  int forged_removed = 0;
  for (std::size_t i = 0; i < 10; ++i)
    forged_removed += plan[i].evict ? 1 : 0;
  EXPECT_GT(forged_removed, 0); // the forger is over their own budget
  EXPECT_FALSE(plan[13].evict);
  EXPECT_EQ(plan[13].reason, "kept: owner unknown");
  // Planned together (what gmem clean --expired did), the victim's traces were the oldest.
  const auto together = plan_retention(e, policy("10%", "15%", 3 * 86400),
                                       {2ull << 30, (2ull << 30) - (1030ull << 20)}, k_now);
  EXPECT_TRUE(together[12].evict);
}

} // namespace
} // namespace gmem::trace
