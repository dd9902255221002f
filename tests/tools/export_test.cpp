// Exports and the HTML report over the sample trace: structure, not bytes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "tests/tools/sample_trace.h"
#include "tools/analysis/trace_facts.h"
#include "tools/export/chrome_export.h"
#include "tools/export/pytorch_export.h"
#include "tools/render/html_report.h"

namespace gmem::tools {
namespace {

using namespace testing;

TEST(chrome_export, counters_instants_and_fences) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  const auto j = chrome_trace(t, symbols);
  ASSERT_TRUE(j.contains("traceEvents"));
  int counters = 0, markers = 0, ooms = 0, fences = 0;
  std::uint64_t last_live = 0;
  for (const auto& e : j["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "C" && e["name"] == "device 0 memory") {
      ++counters;
      last_live = e["args"]["live"];
    }
    if (ph == "i" && e["cat"] == "marker") ++markers;
    if (ph == "i" && e["cat"] == "oom") {
      ++ooms;
      EXPECT_EQ(e["args"]["requested"], 64u << 20);
      EXPECT_EQ(e["args"]["stack"][0], "libmodel.so+0x4040");
    }
    if (ph == "X") {
      ++fences;
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 50.0);
    }
  }
  EXPECT_GT(counters, 5);
  EXPECT_EQ(last_live, 10u << 20);
  EXPECT_EQ(markers, 1);
  EXPECT_EQ(ooms, 1);
  EXPECT_EQ(fences, 1);
}

const py_value& at(const py_value& v, const std::string& key) {
  for (const auto& [k, x] : *std::get<std::shared_ptr<py_dict>>(v.get()))
    if (k == key) return x;
  throw std::runtime_error("no key " + key);
}
const py_list& list(const py_value& v) {
  return *std::get<std::shared_ptr<py_list>>(v.get());
}
std::uint64_t num(const py_value& v) {
  if (auto* i = std::get_if<std::int64_t>(&v.get())) return static_cast<std::uint64_t>(*i);
  return std::get<std::uint64_t>(v.get());
}
std::string str(const py_value& v) {
  return std::get<std::string>(v.get());
}

TEST(pytorch_export, blocks_cover_segments_and_traces_have_actions) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  const py_value snap = pytorch_snapshot(t, symbols);
  const auto& segs = list(at(snap, "segments"));
  ASSERT_EQ(segs.size(), 3u);
  for (const auto& s : segs) {
    std::uint64_t sum = 0, addr = num(at(s, "address"));
    for (const auto& b : list(at(s, "blocks"))) {
      EXPECT_EQ(num(at(b, "address")), addr + sum);
      sum += num(at(b, "size"));
    }
    EXPECT_EQ(sum, num(at(s, "total_size")));
  }
  const auto& blocks1 = list(at(segs[1], "blocks"));
  ASSERT_EQ(blocks1.size(), 4u);
  EXPECT_EQ(str(at(blocks1[0], "state")), "active_allocated");
  EXPECT_EQ(str(at(blocks1[1], "state")), "inactive");
  EXPECT_EQ(str(at(list(at(blocks1[0], "frames"))[0], "name")), "libmodel.so+0x3030");
  const auto& traces = list(at(snap, "device_traces"));
  ASSERT_EQ(traces.size(), 1u);
  std::map<std::string, int> actions;
  for (const auto& e : list(traces[0]))
    ++actions[str(at(e, "action"))];
  EXPECT_EQ(actions["segment_alloc"], 3);
  EXPECT_EQ(actions["alloc"], 7);
  EXPECT_EQ(actions["free_requested"], 1);
  EXPECT_EQ(actions["free_completed"], 1);
  EXPECT_EQ(actions["oom"], 1);
}

TEST(html_report, self_contained_with_drawn_plots) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  const std::string h = html_report(t, symbols);
  if (const char* out = std::getenv("GMEM_TOOLS_REPORT_OUT")) std::ofstream(out) << h; // to look at
  EXPECT_EQ(h.find("<script"), std::string::npos);
  EXPECT_EQ(h.find("http://"), h.find("http://www.w3.org/2000/svg")); // only the SVG namespace
  EXPECT_EQ(h.find("https://"), std::string::npos);
  EXPECT_NE(h.find("<svg class=\"timeline\""), std::string::npos);
  EXPECT_NE(h.find("<svg class=\"segmap\""), std::string::npos);
  const auto live = h.find("<path class=\"live\" d=\"M");
  ASSERT_NE(live, std::string::npos);
  EXPECT_GT(h.find('"', live + 24) - live, 100u); // a real outline, not an empty path
  EXPECT_NE(h.find("epoch 1"), std::string::npos);
  EXPECT_NE(h.find("OOM: 64.0 MiB requested"), std::string::npos);
  EXPECT_NE(h.find("libmodel.so+0x3030"), std::string::npos);
}

} // namespace
} // namespace gmem::tools

namespace gmem::tools {
namespace {

TEST(pytorch_export, host_pool_is_left_out) {
  auto t = testing::sample_trace();
  t.segments.insert(t.segments.begin(), {0x200000000, 2u << 20, -1, 0});
  testing::add_event(t, gmem::trace::event_type::segment_map, 4000 * testing::k_ms, 0x200000000,
                     2u << 20);
  t.events.back().device = -1;
  symbolizer symbols(module_ranges(t));
  const py_value snap = pytorch_snapshot(t, symbols);
  EXPECT_EQ(list(at(snap, "segments")).size(), 3u);
  EXPECT_EQ(list(at(snap, "device_traces")).size(), 1u);
}

} // namespace
} // namespace gmem::tools
