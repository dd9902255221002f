// The exporter's metric set over hand-built traces: the exact exposition text (golden), label
// escaping of hostile command lines and symbols, and the bound on call-site series.
#include <gtest/gtest.h>

#include <prometheus/text_serializer.h>

#include <sstream>

#include "tests/tools/sample_trace.h"
#include "tools/exporter/fleet_metrics.h"
#include "tools/trace_facts.h"

namespace gmem::tools {
namespace {

using testing::golden;
using testing::k_ms;
using testing::sample_trace;

std::string exposition(std::vector<prometheus::MetricFamily> families) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

exporter_options opts(std::size_t top = 5, std::uint64_t window_ns = 4500 * k_ms) {
  exporter_options o;
  o.top_sites = top;
  o.growth_window_ns = window_ns;
  return o;
}

std::size_t count_lines(const std::string& text, const std::string& prefix) {
  std::size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    n += line.rfind(prefix, 0) == 0;
  return n;
}

// Sites of a framework's cache (here every site: the module is PyTorch's libc10_cuda.so and the
// trace records no variable turning the cache off) carry held_by, and their sum is exported.
TEST(fleet_metrics, framework_caches_are_labelled_and_summed) {
  auto t = sample_trace();
  t.modules[0].path = "/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so";
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  fleet_metrics m;
  m.add_process(t, sites, opts());
  const std::string out = exposition(m.take());
  EXPECT_NE(out.find("gmem_framework_cache_bytes{pid=\"4242\",command=\"./leaky --steps 3\","
                     "start_time=\"1790000000\",framework=\"PyTorch\",cache=\"PyTorch's caching "
                     "allocator\"} 10460672"),
            std::string::npos)
      << out;
  EXPECT_EQ(count_lines(out, "gmem_site_live_bytes{"), 3u);
  std::size_t held = 0;
  for (auto at = out.find("held_by=\"PyTorch's caching allocator\"} "); at != std::string::npos;
       at = out.find("held_by=\"PyTorch's caching allocator\"} ", at + 1))
    ++held;
  EXPECT_EQ(held, 9u); // 3 sites x live bytes, live allocations, growth
  // Told that PyTorch's cache was off, the same sites are the program's.
  auto uncached = sample_trace();
  uncached.modules[0].path = t.modules[0].path;
  uncached.info.options = {{"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"}};
  symbolizer symbols2(module_ranges(uncached));
  site_resolver sites2(symbols2);
  fleet_metrics m2;
  m2.add_process(uncached, sites2, opts());
  const std::string out2 = exposition(m2.take());
  EXPECT_EQ(out2.find("gmem_framework_cache_bytes"), std::string::npos);
  EXPECT_EQ(out2.find("held_by"), std::string::npos);
}

TEST(fleet_metrics, golden_exposition) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  fleet_metrics m;
  m.add_process(t, sites, opts());
  scrape_health h;
  h.traces_found = 3;
  h.exported = 1;
  h.skipped_unreadable = 1;
  h.skipped_old = 1;
  h.last_scrape_seconds = 0.25;
  h.scrapes = 7;
  m.add_health(h);
  const std::string out = exposition(m.take());
  EXPECT_EQ(out, golden("exporter_metrics.txt", out));
  // The sites: 8 MiB grew, the stable 1000 KiB did not.
  EXPECT_NE(out.find("gmem_site_growth_bytes{pid=\"4242\",command=\"./leaky --steps 3\","
                     "start_time=\"1790000000\",site=\"b6b8ff5654c0\",frame=\"libmodel.so+0x3030\","
                     "caller=\"libmodel.so+0x2020\"} 8388608"),
            std::string::npos);
}

TEST(fleet_metrics, hostile_labels_are_escaped_and_cut) {
  auto t = sample_trace();
  t.info.command_line = "evil\"}\nfake_metric 1\n\x1b[2J\xff\xfe" + std::string(300, 'A');
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  fleet_metrics m;
  m.add_process(t, sites, opts());
  const std::string out = exposition(m.take());
  EXPECT_EQ(out.find("\nfake_metric"), std::string::npos); // no injected line
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_EQ(out.find("\xff"), std::string::npos); // invalid UTF-8 became \xNN text
  EXPECT_NE(out.find("command=\"evil\\\"}\\\\nfake_metric"), std::string::npos)
      << out.substr(0, 400);
  EXPECT_LE(command_label(t.info.command_line).size(), 100u);
}

TEST(fleet_metrics, call_site_series_are_bounded_by_2k) {
  auto t = sample_trace();
  // 60 distinct stacks, each with a live allocation; half allocated inside the window.
  for (std::uint32_t i = 0; i < 60; ++i) {
    t.stacks[100 + i] = {std::uintptr_t{0x555500010000} + i * 0x10u};
    t.live.push_back({std::uintptr_t{0x7f1000000000} + i * 0x100000u, 4096u + i, 4096u + i, 0, 0,
                      gmem::trace::alloc_kind::device, 1, (i % 2 ? 4900 : 10) * k_ms, 100 + i});
  }
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  for (const std::size_t k : {0u, 1u, 3u, 10u}) {
    fleet_metrics m;
    m.add_process(t, sites, opts(k, 1000 * k_ms));
    const std::string out = exposition(m.take());
    const std::size_t n = count_lines(out, "gmem_site_live_bytes{");
    EXPECT_LE(n, 2 * k) << k;
    EXPECT_GE(n, k) << k;
    EXPECT_EQ(count_lines(out, "gmem_site_growth_bytes{"), n);
  }
}

TEST(fleet_metrics, running_process_and_rate) {
  auto t = sample_trace();
  t.info.state = gmem::trace::trace_state::running;
  t.info.saved_file = false;
  t.info.exit_realtime_ns = 0;
  gmem::trace::stat_sample a, b;
  a.seq = 1;
  a.time_ns = 1000 * k_ms;
  a.stats.total_allocs = 100;
  b.seq = 2;
  b.time_ns = 3000 * k_ms;
  b.stats.total_allocs = 500;
  t.samples = {a, b};
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  fleet_metrics m;
  m.add_process(t, sites, opts(0));
  const std::string out = exposition(m.take());
  EXPECT_NE(out.find("gmem_allocation_rate{pid=\"4242\",command=\"./leaky --steps 3\","
                     "start_time=\"1790000000\",device=\"0\"} 200"),
            std::string::npos);
  EXPECT_NE(out.find("gmem_process_running{pid=\"4242\",command=\"./leaky --steps 3\","
                     "start_time=\"1790000000\"} 1"),
            std::string::npos);
  EXPECT_EQ(out.find("gmem_site_"), std::string::npos); // --top-sites 0
}

} // namespace
} // namespace gmem::tools
