#include "tools/commands/run_env.h"

#include <gtest/gtest.h>

#include "common/options.h"
#include "tools/option_names.h"

namespace gmem::tools {
namespace {

TEST(run_env, preload_goes_first_and_settings_replace) {
  const auto env =
      child_environment({"PATH=/bin", "LD_PRELOAD=/x/other.so:/lib/libgmem.so", "GMEM_LIMIT=1G"},
                        {{"GMEM_LIMIT", "2G"}, {"GMEM_MAX_CACHED", "512M"}}, "/lib/libgmem.so");
  EXPECT_EQ(env, (std::vector<std::string>{"PATH=/bin", "LD_PRELOAD=/lib/libgmem.so:/x/other.so",
                                           "GMEM_LIMIT=2G", "GMEM_MAX_CACHED=512M"}));
  const auto plain = child_environment({"HOME=/root"}, {}, "/lib/libgmem.so");
  EXPECT_EQ(plain, (std::vector<std::string>{"HOME=/root", "LD_PRELOAD=/lib/libgmem.so"}));
}

TEST(run_env, flags_and_values_come_from_the_options_table) {
  EXPECT_EQ(flag_name_of("max_cached"), "--max-cached");
  EXPECT_EQ(check_option_value("GMEM_LIMIT", "8G"), "");
  EXPECT_EQ(check_option_value("GMEM_LIMIT", "75%"), "");
  EXPECT_NE(check_option_value("GMEM_LIMIT", "12X"), "");
  EXPECT_NE(check_option_value("GMEM_MAX_CACHED", "lots"), "");
}

TEST(run_env, advice_names_real_options) {
  std::size_t n = 0;
  const option_row* rows = option_rows(&n);
  for (const char* name : {k_opt_limit, k_opt_max_cached, k_opt_large_segment, k_opt_oversize,
                           k_opt_arena, k_opt_arena_page_mb}) {
    bool found = false;
    for (std::size_t i = 0; i < n; ++i)
      found = found || std::string(rows[i].env_name) == name;
    EXPECT_TRUE(found) << name << " is not in common/options.h";
  }
}

TEST(run_env, missing_library_is_explained) {
  std::string why;
  EXPECT_EQ(find_libgmem("/nonexistent/bin/gmem", nullptr, &why), "");
  EXPECT_NE(why.find("GMEM_LIB"), std::string::npos);
  EXPECT_EQ(find_libgmem("/nonexistent/bin/gmem", "/nonexistent/libgmem.so", &why), "");
  EXPECT_NE(why.find("not a readable file"), std::string::npos);
}

} // namespace
} // namespace gmem::tools
