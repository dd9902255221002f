// Golden tests of the text output. Regenerate after an intended change with
//   GMEM_UPDATE_GOLDEN=1 build/tests/tools_test --gtest_filter='printers*'
// and review the diff of tests/tools/golden/.
#include <sys/wait.h>

#include <gtest/gtest.h>

#include "tests/tools/sample_trace.h"
#include "tools/analysis/frag_report.h"
#include "tools/analysis/leak_report.h"
#include "tools/analysis/trace_facts.h"
#include "tools/commands/run_summary.h"
#include "tools/render/json_output.h"
#include "tools/render/printers.h"
#include "tools/render/top_view.h"

namespace gmem::tools {
namespace {

using namespace testing;

TEST(printers, leaks) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  const std::string out = print_leaks(t, build_leak_report(t, symbols, {}), {});
  EXPECT_EQ(out, golden("leaks.txt", out));
  leak_filter f;
  f.top = 1;
  const std::string top1 = print_leaks(t, build_leak_report(t, symbols, f), {});
  EXPECT_EQ(top1, golden("leaks_top1.txt", top1));
}

TEST(printers, frag) {
  const auto t = sample_trace();
  const std::string out = print_frag(t, build_frag_report(t), {});
  EXPECT_EQ(out, golden("frag.txt", out));
}

TEST(printers, stats) {
  const auto t = sample_trace();
  const std::string out = print_stats(t);
  EXPECT_EQ(out, golden("stats.txt", out));
}

TEST(printers, top) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  const std::string out = render_top(t, symbols, nullptr, 10);
  EXPECT_EQ(out, golden("top.txt", out));
}

TEST(printers, run_summary) {
  const auto t = sample_trace();
  const std::string out = format_run_summary(&t, 4242, "./leaky", 0, {});
  EXPECT_EQ(out, golden("run_summary.txt", out));
  const std::string none = format_run_summary(nullptr, 4242, "./leaky", 9, "no trace object");
  EXPECT_NE(none.find("killed by signal 9"), std::string::npos);
  EXPECT_NE(none.find("no trace object"), std::string::npos);
}

TEST(printers, json_leaks) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  const auto j = leaks_json(t, build_leak_report(t, symbols, {}));
  EXPECT_EQ(j["sites"].size(), 3u);
  EXPECT_EQ(j["sites"][0]["bytes"], 8u << 20);
  EXPECT_EQ(j["sites"][0]["frames"][0]["function"], "libmodel.so+0x3030");
  EXPECT_EQ(j["trace"]["pid"], 4242);
  const std::string out = j.dump(2) + "\n";
  EXPECT_EQ(out, golden("leaks.json", out));
}

} // namespace
} // namespace gmem::tools
