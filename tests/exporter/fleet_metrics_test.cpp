// The exporter's metric set over hand-built traces: the exact exposition text (golden), label
// escaping of hostile command lines and symbols, and the bound on call-site series.
#include <gtest/gtest.h>

#include <prometheus/text_serializer.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "tests/tools/sample_trace.h"
#include "tools/analysis/trace_facts.h"
#include "tools/prometheus/fleet_collector.h"
#include "tools/prometheus/fleet_metrics.h"

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

// The exporter's own user, with --command-line: command line and call sites are shown.
process_owner owner_self() {
  return {1000, "alice", true, "/opt/app/leaky", true};
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
  m.add_process(t, &sites, owner_self(), opts());
  const std::string out = exposition(m.take());
  const auto line = out.find("gmem_framework_cache_bytes{pid=\"4242\",");
  ASSERT_NE(line, std::string::npos) << out;
  EXPECT_NE(out.find("framework=\"PyTorch\",cache=\"PyTorch's caching allocator\"} 10460672", line),
            std::string::npos)
      << out;
  EXPECT_EQ(count_lines(out, "gmem_site_live_bytes{"), 3u);
  std::size_t held = 0;
  const std::string cache = "held_by=\"PyTorch's caching allocator\",verdict=\"framework_cache\"} ";
  for (auto at = out.find(cache); at != std::string::npos; at = out.find(cache, at + 1))
    ++held;
  EXPECT_EQ(held, 9u); // 3 sites x live bytes, live allocations, growth
  // Told that PyTorch's cache was off, the same sites are the program's.
  auto uncached = sample_trace();
  uncached.modules[0].path = t.modules[0].path;
  uncached.info.options = {{"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"}};
  symbolizer symbols2(module_ranges(uncached));
  site_resolver sites2(symbols2);
  fleet_metrics m2;
  m2.add_process(uncached, &sites2, owner_self(), opts());
  const std::string out2 = exposition(m2.take());
  EXPECT_EQ(out2.find("gmem_framework_cache_bytes"), std::string::npos);
  EXPECT_EQ(out2.find("held_by"), std::string::npos);
}

TEST(fleet_metrics, golden_exposition) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  fleet_metrics m;
  m.add_process(t, &sites, owner_self(), opts());
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
  EXPECT_NE(out.find("gmem_site_growth_bytes{pid=\"4242\",uid=\"1000\",user=\"alice\","
                     "exe=\"leaky\",start_time=\"1790000000\",command=\"./leaky --steps 3\","
                     "site=\"b6b8ff5654c0\",frame=\"libmodel.so+0x3030\","
                     "caller=\"libmodel.so+0x2020\",verdict=\"leak\"} 8388608"),
            std::string::npos);
}

TEST(fleet_metrics, hostile_labels_are_escaped_and_cut) {
  auto t = sample_trace();
  t.info.command_line = "evil\"}\nfake_metric 1\n\x1b[2J\xff\xfe" + std::string(300, 'A');
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  fleet_metrics m;
  m.add_process(t, &sites, owner_self(), opts());
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
    m.add_process(t, &sites, owner_self(), opts(k, 1000 * k_ms));
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
  m.add_process(t, &sites, owner_self(), opts(0));
  const std::string out = exposition(m.take());
  EXPECT_NE(out.find("gmem_allocation_rate{pid=\"4242\",uid=\"1000\",user=\"alice\","
                     "exe=\"leaky\",start_time=\"1790000000\",command=\"./leaky --steps 3\","
                     "device=\"0\"} 200"),
            std::string::npos);
  EXPECT_NE(out.find("gmem_process_running{pid=\"4242\",uid=\"1000\",user=\"alice\","
                     "exe=\"leaky\",start_time=\"1790000000\",command=\"./leaky --steps 3\"} 1"),
            std::string::npos);
  EXPECT_EQ(out.find("gmem_site_"), std::string::npos); // --top-sites 0
}

// A read cut by --max-object-bytes says so for its process, with the number of sections cut; an
// uncut one has no such series.
TEST(fleet_metrics, a_cut_read_is_flagged_per_process) {
  auto t = sample_trace();
  fleet_metrics whole;
  whole.add_process(t, nullptr, owner_self(), opts(0));
  EXPECT_EQ(exposition(whole.take()).find("gmem_trace_cut_sections"), std::string::npos);
  t.info.cut_sections = 0b10100;
  fleet_metrics cut;
  cut.add_process(t, nullptr, owner_self(), opts(0));
  EXPECT_NE(exposition(cut.take())
                .find("gmem_trace_cut_sections{pid=\"4242\",uid=\"1000\",user=\"alice\","
                      "exe=\"leaky\",start_time=\"1790000000\",command=\"./leaky --steps 3\"} 2"),
            std::string::npos);
}

// Case R6 of docs/security.md: another user's process is named by pid, uid, user, exe and
// start_time only: no command line (it may hold a token), no call-site series (function names,
// source paths).
TEST(fleet_metrics, another_users_process_shows_no_command_line_or_frames) {
  auto t = sample_trace();
  t.info.argv = {"/home/bob/secret-project/bin/train", "--api-token=hunter2"};
  t.info.command_line = "/home/bob/secret-project/bin/train --api-token=hunter2";
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  fleet_metrics m;
  m.add_process(t, &sites, {1001, "bob", false, "/home/bob/secret-project/bin/train (deleted)"},
                opts());
  const std::string out = exposition(m.take());
  EXPECT_EQ(out.find("hunter2"), std::string::npos) << out;
  EXPECT_EQ(out.find("secret-project"), std::string::npos) << out;
  EXPECT_EQ(out.find("command="), std::string::npos);
  EXPECT_EQ(out.find("gmem_site_"), std::string::npos);
  EXPECT_EQ(out.find("frame="), std::string::npos);
  EXPECT_NE(out.find("gmem_live_bytes{pid=\"4242\",uid=\"1001\",user=\"bob\",exe=\"train\","
                     "start_time=\"1790000000\",device=\"0\"}"),
            std::string::npos)
      << out;
}

// Command lines are served only with --command-line (and only where call sites are); exe is
// the executable the collector found under /proc, never argv[0], which a program sets.
TEST(fleet_metrics, no_command_line_by_default_and_exe_from_the_executable) {
  auto t = sample_trace();
  t.info.argv = {"/usr/bin/innocent", "--api-token=hunter2"};
  t.info.command_line = "/usr/bin/innocent --api-token=hunter2";
  fleet_metrics m;
  m.add_process(t, nullptr, {0, "root", true, "/opt/batch/bin/real-job"}, opts(0));
  const std::string out = exposition(m.take());
  EXPECT_EQ(out.find("hunter2"), std::string::npos) << out;
  EXPECT_EQ(out.find("command="), std::string::npos) << out;
  EXPECT_EQ(out.find("innocent"), std::string::npos) << out;
  EXPECT_NE(out.find("exe=\"real-job\""), std::string::npos) << out;
  fleet_metrics opted;
  opted.add_process(t, nullptr, {0, "root", true, "/opt/batch/bin/real-job", true}, opts(0));
  EXPECT_NE(exposition(opted.take()).find("command=\"/usr/bin/innocent --api-token=hunter2\""),
            std::string::npos);
}

// A minor case of docs/security.md: a right-to-left override (U+202E) and the other bidirectional
// controls never reach a label raw; they are escaped as the terminal output is.
TEST(fleet_metrics, bidirectional_controls_in_labels_are_escaped) {
  auto t = sample_trace();
  t.info.argv = {"./\xe2\x80\xaegnp.exe\xe2\x81\xa6x"};
  t.info.command_line = t.info.argv[0];
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  fleet_metrics m;
  process_owner owner = owner_self();
  owner.exe = "/tmp/" + t.info.argv[0].substr(2);
  m.add_process(t, &sites, owner, opts(0));
  const std::string out = exposition(m.take());
  EXPECT_EQ(out.find("\xe2\x80\xae"), std::string::npos);
  EXPECT_EQ(out.find("\xe2\x81\xa6"), std::string::npos);
  EXPECT_NE(out.find("exe=\"\\\\u202egnp.exe\\\\u2066x\""), std::string::npos) << out;
}

// Case R7 of docs/security.md: forged objects cannot crowd out real processes. Running processes
// first, users take turns within a tier, times in the future last.
TEST(fleet_collector, rank_entries_is_fair_and_puts_future_times_last) {
  const std::uint64_t now = 1'790'000'000'000'000'000u;
  std::vector<gmem::trace::trace_entry> e;
  auto add = [&](std::uint32_t uid, std::uint32_t pid, bool running, std::uint64_t start) {
    gmem::trace::trace_entry x;
    x.name = "gmem." + std::to_string(pid) + ".1";
    x.uid = uid;
    x.pid = pid;
    x.readable = true;
    x.state = running ? gmem::trace::trace_state::running : gmem::trace::trace_state::exited;
    x.start_realtime_ns = start;
    x.exit_realtime_ns = running ? 0 : start + 1;
    e.push_back(x);
  };
  const std::uint64_t year = 365ull * 86400 * 1'000'000'000u;
  for (std::uint32_t i = 0; i < 10; ++i) // the attacker: running, a year ahead
    add(666, 100 + i, true, now + year + i);
  for (std::uint32_t i = 0; i < 5; ++i) // the attacker: running, plausible
    add(666, 200 + i, true, now - 1000 - i);
  add(0, 1, true, now - 5000);      // root's service
  add(1000, 2, true, now - 9000);   // alice's job
  add(1000, 3, false, now - 8000);  // alice's ended job
  add(666, 300, false, now + year); // the attacker: ended a year ahead
  std::vector<ranked_entry> w;
  for (const auto& x : e)
    w.push_back({&x, 0, 0});
  rank_entries(w, now, 0);
  std::vector<std::uint32_t> order;
  for (const auto& r : w)
    order.push_back(r.entry->pid);
  // Every user's first running process, then the rest in turns; ended; future last.
  ASSERT_EQ(order.size(), e.size());
  const std::vector<std::uint32_t> first(order.begin(), order.begin() + 3);
  EXPECT_EQ(std::set<std::uint32_t>(first.begin(), first.end()),
            (std::set<std::uint32_t>{1, 2, 200}));
  EXPECT_EQ(order[7], 3u);
  for (std::size_t k = 8; k < order.size(); ++k)
    EXPECT_TRUE((order[k] >= 100 && order[k] < 110) || order[k] == 300) << k;
  EXPECT_EQ(order.back(), 300u);
}

// A slow forged trace named after the attacker's own running process, claiming a start 30 s
// ahead, used to rank first every turn and spend the scrape's budget before the victim's
// running job. Now nothing a trace claims moves it ahead: the exporter's own user first, then
// users in turns, the smaller object first; and preselect reads in that order too.
TEST(fleet_collector, a_claimed_start_time_does_not_rank_a_trace_first) {
  const std::uint64_t now = 1'790'000'000'000'000'000u;
  std::vector<gmem::trace::trace_entry> e(3);
  e[0].name = "gmem.500.9000", e[0].uid = 666, e[0].pid = 500, e[0].proc_start_ticks = 9000;
  e[0].start_realtime_ns = now + 30'000'000'000u, e[0].allocated_bytes = 512u << 20;
  e[1].name = "gmem.400.100", e[1].uid = 1000, e[1].pid = 400, e[1].proc_start_ticks = 100;
  e[1].start_realtime_ns = now - 60'000'000'000u, e[1].allocated_bytes = 1u << 20;
  e[2].name = "gmem.300.50", e[2].uid = 0, e[2].pid = 300, e[2].proc_start_ticks = 50;
  e[2].start_realtime_ns = now - 90'000'000'000u, e[2].allocated_bytes = 2u << 20;
  std::vector<ranked_entry> w;
  for (auto& x : e) {
    x.readable = true;
    x.state = gmem::trace::trace_state::running;
    w.push_back({&x, 0, 0});
  }
  rank_entries(w, now, 0);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[0].entry->pid, 300u); // the exporter's own user (root)
  EXPECT_EQ(w[1].entry->pid, 400u); // the victim: smaller, though it claims an older start
  EXPECT_EQ(w[2].entry->pid, 500u);
  rank_entries(w, now, 666); // an exporter run by the attacker's user serves that user first
  EXPECT_EQ(w[0].entry->pid, 500u);
}

// Case R7, the reading side: however many objects one user plants, a scrape reads at most a
// bounded number of them; other users' objects are all kept.
TEST(fleet_collector, preselect_bounds_each_users_objects_before_reading) {
  std::vector<gmem::trace::trace_entry> e;
  for (std::uint32_t i = 0; i < 300; ++i) {
    gmem::trace::trace_entry x;
    x.name = "gmem.4000000000." + std::to_string(i);
    x.pid = 4000000000u; // no such process
    x.proc_start_ticks = i;
    x.uid = 666;
    e.push_back(x);
  }
  for (std::uint32_t i = 0; i < 3; ++i) {
    gmem::trace::trace_entry x;
    x.name = "gmem.4000000001." + std::to_string(i);
    x.pid = 4000000001u;
    x.proc_start_ticks = i;
    x.uid = 1000;
    e.push_back(x);
  }
  EXPECT_EQ(preselect(e, 10, 0), 290u);
  ASSERT_EQ(e.size(), 13u);
  std::size_t alice = 0;
  std::uint64_t oldest_kept = ~std::uint64_t{0};
  for (const auto& x : e) {
    alice += x.uid == 1000;
    if (x.uid == 666) oldest_kept = std::min(oldest_kept, x.proc_start_ticks);
  }
  EXPECT_EQ(alice, 3u);
  EXPECT_EQ(oldest_kept, 290u); // the newest by start ticks
}

} // namespace
} // namespace gmem::tools
