// The GMEM_* options table (common/options.h): parsing, defaults, warnings, and that README's
// option table lists every row.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>

#include "common/options.h"

namespace {

struct parsed {
  gmem::options o;
  std::vector<std::string> warnings;
};

parsed parse(std::map<std::string, std::string> env) {
  parsed p;
  p.o = gmem::options::parse(
      [&](const char* name) -> const char* {
        auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      [&](const std::string& line) { p.warnings.push_back(line); });
  return p;
}

TEST(options, defaults) {
  const parsed p = parse({});
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_TRUE(p.o.enable);
  EXPECT_TRUE(p.o.reuse_safety);
  EXPECT_TRUE(p.o.host);
  EXPECT_FALSE(p.o.limit_set);
  EXPECT_EQ(p.o.limit.resolve(1000), 0u);
  EXPECT_EQ(p.o.verbose, 0u);
  EXPECT_EQ(p.o.warmup, 0u);
}

TEST(options, values) {
  const parsed p = parse({{"GMEM_ENABLE", "0"},
                          {"GMEM_LIMIT", "12G"},
                          {"GMEM_MAX_CACHED", "512M"},
                          {"GMEM_SMALL_SEGMENT", "4M"},
                          {"GMEM_REUSE_SAFETY", "off"},
                          {"GMEM_VERBOSE", "2"}});
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_FALSE(p.o.enable);
  EXPECT_TRUE(p.o.limit_set);
  EXPECT_EQ(p.o.limit.resolve(0), 12ull << 30);
  EXPECT_EQ(p.o.max_cached, 512ull << 20);
  EXPECT_TRUE(p.o.small_segment_set);
  EXPECT_EQ(p.o.small_segment, 4ull << 20);
  EXPECT_FALSE(p.o.reuse_safety);
  EXPECT_EQ(p.o.verbose, 2u);
}

TEST(options, percentage_limit) {
  const parsed p = parse({{"GMEM_LIMIT", "75%"}});
  EXPECT_TRUE(p.o.limit_set);
  EXPECT_TRUE(p.o.limit.is_percent);
  EXPECT_EQ(p.o.limit.resolve(1000), 750u);
}

TEST(options, bad_values_warn_and_keep_defaults) {
  const parsed p = parse({{"GMEM_LIMIT", "12X"}, {"GMEM_ENABLE", "maybe"}, {"GMEM_VERBOSE", "-1"}});
  ASSERT_EQ(p.warnings.size(), 3u);
  EXPECT_EQ(p.warnings[0], "gmem: warning: GMEM_ENABLE='maybe' is not 0 or 1; using 1");
  EXPECT_EQ(p.warnings[1], "gmem: warning: GMEM_LIMIT='12X' is not a size; using no limit");
  EXPECT_EQ(p.warnings[2], "gmem: warning: GMEM_VERBOSE='-1' is not a whole number; using 0");
  EXPECT_TRUE(p.o.enable);
  EXPECT_FALSE(p.o.limit_set);
  EXPECT_EQ(p.o.verbose, 0u);
}

// Options (docs/security.md): values that parse but cannot work are refused, naming the option.
TEST(options, values_that_cannot_work_are_refused) {
  const parsed p = parse({{"GMEM_LIMIT", "1"},
                          {"GMEM_TRACE_LIVE", "9999999999999999999"},
                          {"GMEM_TRACE_EVENTS", "9999999999999"}});
  ASSERT_EQ(p.warnings.size(), 3u);
  EXPECT_EQ(p.warnings[0], "gmem: warning: GMEM_LIMIT='1' is below 1 MiB: every allocation would "
                           "fail; using no limit");
  EXPECT_NE(p.warnings[1].find("GMEM_TRACE_LIVE='9999999999999999999' is more than"),
            std::string::npos)
      << p.warnings[1];
  EXPECT_NE(p.warnings[2].find("GMEM_TRACE_EVENTS='9999999999999' is more than"), std::string::npos)
      << p.warnings[2];
  EXPECT_FALSE(p.o.limit_set);
  EXPECT_EQ(p.o.trace_live, gmem::options::defaults().trace_live);
  EXPECT_EQ(p.o.trace_events, gmem::options::defaults().trace_events);
  // The smallest limit that can work, and a real one, pass.
  EXPECT_TRUE(parse({{"GMEM_LIMIT", "1M"}}).warnings.empty());
  EXPECT_TRUE(parse({{"GMEM_TRACE_LIVE", "536870912"}}).warnings.empty());
}

TEST(options, warn_once_prints_each_line_once) {
  testing::internal::CaptureStderr();
  gmem::options::warn_once("gmem: warning: test line A");
  gmem::options::warn_once("gmem: warning: test line A");
  gmem::options::warn_once("gmem: warning: test line B");
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "gmem: warning: test line A\ngmem: warning: test line B\n");
}

// A setuid, setgid or capability-raised process (AT_SECURE): its environment is its caller's,
// so no GMEM_* variable applies, and one line says which were ignored.
TEST(options, secure_execution_ignores_every_gmem_variable) {
  setenv("GMEM_TRACE_SAVE", "/etc/gmem-%p", 1);
  setenv("GMEM_REUSE_SAFETY", "0", 1);
  setenv("GMEM_TRACE_KEEP_AGE", "1ms", 1);
  const bool secure = true;
  gmem::options::set_secure_for_testing(&secure);
  testing::internal::CaptureStderr();
  const gmem::options o = gmem::options::from_env();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(gmem::options::env_value("GMEM_TRACE_SAVE"), nullptr);
  EXPECT_NE(gmem::options::env_value("PATH"), nullptr); // only gmem's own variables
  gmem::options::set_secure_for_testing(nullptr);
  const gmem::options d = gmem::options::defaults();
  EXPECT_EQ(o.trace_save, "");
  EXPECT_TRUE(o.reuse_safety);
  EXPECT_EQ(o.keep_age, d.keep_age);
  EXPECT_NE(err.find("GMEM_REUSE_SAFETY, GMEM_TRACE_SAVE, GMEM_TRACE_KEEP_AGE ignored: this "
                     "process runs with privileges its caller lacks"),
            std::string::npos)
      << err;
  // A normal process reads them.
  EXPECT_EQ(gmem::options::from_env().trace_save, "/etc/gmem-%p");
  unsetenv("GMEM_TRACE_SAVE");
  unsetenv("GMEM_REUSE_SAFETY");
  unsetenv("GMEM_TRACE_KEEP_AGE");
}

TEST(options, arena_page_is_a_power_of_two_of_at_least_2_mib) {
  EXPECT_TRUE(parse({}).o.arena); // on by default
  EXPECT_FALSE(parse({{"GMEM_ARENA", "0"}}).o.arena);
  EXPECT_EQ(parse({}).o.arena_page_mb, 16u);
  EXPECT_EQ(parse({{"GMEM_ARENA_PAGE_MB", "64"}}).o.arena_page_mb, 64u);
  for (const char* bad : {"0", "1", "3", "24", "2097152"}) {
    const parsed p = parse({{"GMEM_ARENA_PAGE_MB", bad}});
    ASSERT_EQ(p.warnings.size(), 1u) << bad;
    EXPECT_EQ(p.warnings[0], std::string("gmem: warning: GMEM_ARENA_PAGE_MB='") + bad +
                                 "' is not a power of two from 2 to 1048576; using 16");
    EXPECT_EQ(p.o.arena_page_mb, 16u);
    EXPECT_FALSE(p.o.arena_page_mb_set);
  }
}

// The fallback policy's options (no arena) do nothing under the default arena: the user is
// told, once, and they still parse (a device without VMM falls back and uses them).
TEST(options, fallback_options_warn_while_the_arena_is_on) {
  const parsed p = parse({{"GMEM_OVERSIZE", "64M"}, {"GMEM_LARGE_SEGMENT", "80M"}});
  ASSERT_EQ(p.warnings.size(), 2u);
  EXPECT_EQ(p.warnings[0], "gmem: warning: GMEM_LARGE_SEGMENT='80M' applies only without the "
                           "arena (GMEM_ARENA=0, or a device without virtual memory "
                           "management); the arena (GMEM_ARENA=1, the default) ignores it");
  EXPECT_NE(p.warnings[1].find("GMEM_OVERSIZE='64M' applies only without the arena"),
            std::string::npos);
  EXPECT_EQ(p.o.oversize, 64ull << 20);
  const parsed off =
      parse({{"GMEM_ARENA", "0"}, {"GMEM_OVERSIZE", "64M"}, {"GMEM_LARGE_SEGMENT", "80M"}});
  EXPECT_TRUE(off.warnings.empty());
}

TEST(options, table_rows_are_unique_and_named_gmem) {
  std::size_t n = 0;
  const gmem::option_row* rows = gmem::option_rows(&n);
  ASSERT_GT(n, 8u);
  std::map<std::string, int> seen;
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(std::string(rows[i].env_name).rfind("GMEM_", 0), 0u) << rows[i].env_name;
    EXPECT_EQ(seen[rows[i].env_name]++, 0) << rows[i].env_name;
    EXPECT_GT(std::string(rows[i].help).size(), 10u) << rows[i].env_name;
  }
}

// README's table and gmem-options(7) show the options a user tunes apart from the fallback,
// diagnosis and testing switches: a row whose help says which it is has that category.
TEST(options, categories_match_what_the_help_says) {
  std::size_t n = 0;
  const gmem::option_row* rows = gmem::option_rows(&n);
  std::size_t tuned = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::string help = rows[i].help;
    SCOPED_TRACE(rows[i].env_name);
    if (help.find("TESTING ONLY") != std::string::npos) {
      EXPECT_EQ(rows[i].category, gmem::option_category::testing);
    }
    if (help.find("diagnosis only") != std::string::npos) {
      EXPECT_EQ(rows[i].category, gmem::option_category::diagnosis);
    }
    if (help.find("fallback only") != std::string::npos) {
      EXPECT_EQ(rows[i].category, gmem::option_category::fallback);
    }
    if (rows[i].category == gmem::option_category::tune) ++tuned;
  }
  EXPECT_GT(tuned, n / 2);
  EXPECT_LT(tuned, n);
}

TEST(options, readme_lists_every_option) {
  std::ifstream in("README.md");
  if (!in) GTEST_FAIL() << "README.md not found (run from the repository root)";
  std::stringstream text;
  text << in.rdbuf();
  std::size_t n = 0;
  const gmem::option_row* rows = gmem::option_rows(&n);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_NE(text.str().find(std::string("`") + rows[i].env_name + "`"), std::string::npos)
        << rows[i].env_name << " is missing from README.md";
  }
}

} // namespace
