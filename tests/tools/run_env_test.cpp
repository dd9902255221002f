#include "tools/commands/run_env.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>

#include "common/framework_env.h"
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
                           k_opt_arena, k_opt_arena_page_mb, k_opt_stitch}) {
    bool found = false;
    for (std::size_t i = 0; i < n; ++i)
      found = found || std::string(rows[i].env_name) == name;
    EXPECT_TRUE(found) << name << " is not in common/options.h";
  }
}

// GMEM_FRAMEWORKS: observe sets nothing; pool sets what is unset and keeps what the
// user set, to any value; the flag (a setting) beats the environment; one line says what was
// done.
TEST(run_env, frameworks_pool_sets_only_what_the_user_did_not) {
  const std::string tail = " (CUDA graphs and torch.compile(mode=\"reduce-overhead\") need "
                           "PyTorch's cache: --frameworks observe)";
  const auto observe = framework_plan({"PATH=/bin"}, {});
  EXPECT_TRUE(observe.set.empty());
  EXPECT_TRUE(observe.kept.empty());
  EXPECT_EQ(observe.message, "");
  const auto pool = framework_plan({"PATH=/bin"}, {{"GMEM_FRAMEWORKS", "pool"}});
  EXPECT_EQ(pool.set, (std::vector<std::pair<std::string, std::string>>{
                          {"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"},
                          {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
                          {"XLA_PYTHON_CLIENT_PREALLOCATE", "false"}}));
  EXPECT_EQ(pool.message, "gmem: GMEM_FRAMEWORKS=pool: set PYTORCH_NO_CUDA_MEMORY_CACHING=1 "
                          "XLA_PYTHON_CLIENT_ALLOCATOR=platform "
                          "XLA_PYTHON_CLIENT_PREALLOCATE=false" +
                              tail);
  const auto user = framework_plan({"PYTORCH_NO_CUDA_MEMORY_CACHING=0", "GMEM_FRAMEWORKS=pool",
                                    "XLA_PYTHON_CLIENT_PREALLOCATE="},
                                   {});
  EXPECT_EQ(user.set, (std::vector<std::pair<std::string, std::string>>{
                          {"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}}));
  EXPECT_EQ(user.message, "gmem: GMEM_FRAMEWORKS=pool: set XLA_PYTHON_CLIENT_ALLOCATOR=platform; "
                          "kept as you set them: PYTORCH_NO_CUDA_MEMORY_CACHING=0 "
                          "XLA_PYTHON_CLIENT_PREALLOCATE=" +
                              tail);
  EXPECT_TRUE(framework_plan({"GMEM_FRAMEWORKS=pool"}, {{"GMEM_FRAMEWORKS", "off"}}).set.empty());
  EXPECT_TRUE(framework_plan({"GMEM_FRAMEWORKS=off"}, {}).set.empty());
  EXPECT_EQ(framework_plan({"GMEM_FRAMEWORKS=observe"}, {{"GMEM_FRAMEWORKS", "pool"}}).set.size(),
            3u);
  // What pool sets, child_environment puts in: the user's values stay.
  const auto env = child_environment({"PYTORCH_NO_CUDA_MEMORY_CACHING=0"}, user.set, "/l.so");
  EXPECT_EQ(env, (std::vector<std::string>{"PYTORCH_NO_CUDA_MEMORY_CACHING=0", "LD_PRELOAD=/l.so",
                                           "XLA_PYTHON_CLIENT_ALLOCATOR=platform"}));
  EXPECT_EQ(check_option_value("GMEM_FRAMEWORKS", "pool"), "");
  EXPECT_EQ(check_option_value("GMEM_FRAMEWORKS", "maybe"),
            "gmem: warning: GMEM_FRAMEWORKS='maybe' is not observe, pool or off; using observe");
}

TEST(run_env, the_trace_records_the_framework_variables) {
  EXPECT_TRUE(is_recorded_framework_variable("PYTORCH_NO_CUDA_MEMORY_CACHING=1"));
  EXPECT_TRUE(is_recorded_framework_variable("PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync"));
  EXPECT_TRUE(is_recorded_framework_variable("XLA_PYTHON_CLIENT_ALLOCATOR=platform"));
  EXPECT_FALSE(is_recorded_framework_variable("PYTORCH_NO_CUDA_MEMORY_CACHING_X=1"));
  EXPECT_FALSE(is_recorded_framework_variable("HOME=/root"));
  // Every variable pool mode sets is recorded: the readers can tell what it did.
  std::size_t n = 0;
  const framework_setting* rows = framework_pool_settings(&n);
  for (std::size_t i = 0; i < n; ++i)
    EXPECT_TRUE(is_recorded_framework_variable(rows[i].variable)) << rows[i].variable;
}

TEST(run_env, missing_library_is_explained) {
  std::string why;
  EXPECT_EQ(find_libgmem("/nonexistent/bin/gmem", nullptr, &why, geteuid()), "");
  EXPECT_NE(why.find("GMEM_LIB"), std::string::npos);
  EXPECT_EQ(find_libgmem("/nonexistent/bin/gmem", "/nonexistent/libgmem.so", &why, geteuid()), "");
  EXPECT_NE(why.find("not a readable file"), std::string::npos);
}

// A library in a directory that others may write is not preloaded, explicit or found.
TEST(run_env, library_others_can_change_is_refused) {
  char tmpl[] = "/tmp/gmem_runenv_XXXXXX";
  const std::string root = mkdtemp(tmpl);
  ASSERT_EQ(chmod(root.c_str(), 0777), 0);
  ASSERT_EQ(mkdir((root + "/bin").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((root + "/lib").c_str(), 0755), 0);
  const std::string lib = root + "/lib/libgmem.so";
  FILE* f = std::fopen(lib.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fclose(f);
  std::string why;
  EXPECT_EQ(find_libgmem(root + "/bin/gmem", nullptr, &why, geteuid()), "");
  EXPECT_NE(why.find(root + " is writable by others"), std::string::npos) << why;
  EXPECT_EQ(find_libgmem("/usr/bin/gmem", lib.c_str(), &why, geteuid()), "");
  EXPECT_NE(why.find("GMEM_LIB=" + lib + " is not used"), std::string::npos) << why;
  ASSERT_EQ(chmod(root.c_str(), 0755), 0);
  EXPECT_EQ(find_libgmem(root + "/bin/gmem", nullptr, &why, geteuid()), lib) << why;
  (void)std::system(("rm -rf '" + root + "'").c_str());
}

} // namespace
} // namespace gmem::tools
