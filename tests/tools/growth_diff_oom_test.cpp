// leaks --growth, diff and oom: the analyses over hand-built traces, exactly, and their text
// printers against golden files.
#include <gtest/gtest.h>

#include "tests/tools/sample_trace.h"
#include "tools/analysis/growth_report.h"
#include "tools/analysis/oom_report.h"
#include "tools/analysis/trace_diff.h"
#include "tools/analysis/trace_facts.h"
#include "tools/render/analysis_printers.h"

namespace gmem::tools {
namespace {

using gmem::trace::event_type;
using testing::add_event;
using testing::golden;
using testing::k_ms;
using testing::k_seg0;
using testing::k_seg1;
using testing::sample_trace;

// The site (by its first frame's name) -> growth, for readable expectations.
std::int64_t growth_of(const growth_report& r, const site_resolver& s, const std::string& first) {
  for (const auto& g : r.sites)
    if (!s.site(g.site).frames.empty() && s.site(g.site).frames[0].name() == first)
      return g.growth_bytes;
  ADD_FAILURE() << "no site " << first;
  return -1;
}

TEST(growth_report, window_counts_new_live_minus_old_freed) {
  const auto t = sample_trace(); // exited at 5 s
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  // Last 2 s: only stack 3's allocation at 3.0 s is new.
  growth_report r = build_growth_report(t, sites, 2000 * k_ms);
  EXPECT_TRUE(r.is_valid());
  EXPECT_FALSE(r.incomplete);
  EXPECT_EQ(r.from_ns, 3000 * k_ms);
  EXPECT_EQ(growth_of(r, sites, "libmodel.so+0x4040"), (1 << 20) - 512);
  EXPECT_EQ(growth_of(r, sites, "libmodel.so+0x3030"), 0);
  EXPECT_EQ(growth_of(r, sites, "libmodel.so+0x1010"), 0);
  EXPECT_EQ(sites.site(r.sites[0].site).frames[0].name(), "libmodel.so+0x4040");
  // Last 4.5 s: stack 2's 8 MiB (1.0 s) is new; its 2 MiB at 1.5 s came and went.
  r = build_growth_report(t, sites, 4500 * k_ms);
  EXPECT_TRUE(r.is_valid());
  EXPECT_EQ(growth_of(r, sites, "libmodel.so+0x3030"), 8 << 20);
  EXPECT_EQ(r.sites[0].allocs_in_window, 2u);
}

TEST(growth_report, frees_of_older_allocations_shrink_their_site) {
  auto t = sample_trace();
  // Stack 1 allocated 300 KiB at 200 ms and freed it at 4 s: -300 KiB over the last 2 s.
  add_event(t, event_type::alloc, 200 * k_ms, k_seg0 + (1 << 20), 300 << 10, 300 << 10, 1);
  add_event(t, event_type::free, 4000 * k_ms, k_seg0 + (1 << 20), 300 << 10, 300 << 10);
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  const growth_report r = build_growth_report(t, sites, 2000 * k_ms);
  EXPECT_TRUE(r.is_valid());
  EXPECT_EQ(growth_of(r, sites, "libmodel.so+0x1010"), -(300 << 10));
  EXPECT_EQ(r.sites.back().freed_old_count, 1u);
}

TEST(growth_report, lost_events_make_it_incomplete_not_wrong) {
  auto t = sample_trace();
  // The ring lapped: only events from seq 8 on survive; a free at 4 s of an address whose
  // allocation is gone cannot be charged to a site.
  t.events.erase(t.events.begin(), t.events.begin() + 7);
  add_event(t, event_type::free, 4000 * k_ms, k_seg1 + (16 << 20), 4096, 4096);
  t.losses.lost_events = 7;
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  const growth_report r = build_growth_report(t, sites, 4900 * k_ms);
  EXPECT_TRUE(r.incomplete);
  EXPECT_EQ(r.unknown_freed_bytes, 4096u);
  EXPECT_TRUE(r.is_valid());
  const growth_report top1 = build_growth_report(t, sites, 4900 * k_ms, 1);
  EXPECT_EQ(top1.sites.size(), 1u);
  EXPECT_EQ(top1.hidden_sites, r.sites.size() - 1);
}

TEST(growth_report, printer_golden) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  const growth_report r = build_growth_report(t, sites, 4500 * k_ms);
  const std::string out = print_growth(t, r, sites, print_options{});
  EXPECT_EQ(out, golden("growth.txt", out));
}

TEST(call_sites, ids_are_stable_and_labels_skip_allocator_frames) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  const std::size_t a = sites.site_of(t, 1), b = sites.site_of(t, 2), none = sites.site_of(t, 0);
  EXPECT_NE(sites.site(a).id, sites.site(b).id);
  EXPECT_EQ(sites.site(a).id.size(), 12u);
  EXPECT_EQ(sites.site(a).id, site_id(sites.site(a).key)); // a pure function of the key
  EXPECT_EQ(sites.site_of(t, 1), a);                       // cached
  EXPECT_EQ(sites.site(none).label, "(no stack)");
  EXPECT_EQ(sites.site(a).label, "libmodel.so+0x1010");
  EXPECT_EQ(sites.site(a).caller, "libmodel.so+0x2020");
  std::vector<frame_info> f(3);
  f[0].function = "cuMemAlloc_v2";
  f[1].function = "cudaMalloc";
  f[2].function = "train_step()";
  f[2].file = "/src/train.cpp";
  f[2].line = 7;
  std::string caller;
  EXPECT_EQ(site_label(f, &caller), "train_step() at train.cpp:7");
  EXPECT_EQ(caller, "");
  // Hostile names: escaped, cut on a UTF-8 boundary.
  f[2].function = "evil\x1b[2J" + std::string(200, 'x') + "\xc3\xa9";
  const std::string l = site_label(f);
  EXPECT_LE(l.size(), k_site_label_max);
  EXPECT_EQ(l.find('\x1b'), std::string::npos);
}

TEST(trace_diff, same_process_matches_allocations) {
  const auto a = sample_trace();
  auto b = sample_trace();
  // B: stack 3's block was freed, stack 1 made a new 100 KiB allocation.
  b.live.erase(b.live.begin() + 5);
  b.live.push_back({k_seg0 + (1 << 20), 100 << 10, 100 << 10, 0, 0, gmem::trace::alloc_kind::device,
                    4242, 6000 * k_ms, 1});
  b.info.exit_realtime_ns += 2000 * k_ms;
  symbolizer sa(module_ranges(a)), sb(module_ranges(b));
  site_resolver ra(sa), rb(sb);
  const trace_diff d = build_trace_diff(a, ra, b, rb);
  EXPECT_TRUE(d.same_process);
  EXPECT_TRUE(d.is_valid());
  ASSERT_EQ(d.sites.size(), 3u);
  EXPECT_EQ(d.sites[0].net_bytes(), 100 << 10);
  EXPECT_EQ(d.sites[0].added_count, 1u);
  EXPECT_EQ(d.sites[0].freed_count, 0u);
  EXPECT_EQ(d.sites[2].net_bytes(), -((1 << 20) - 512));
  EXPECT_EQ(d.sites[2].freed_count, 1u);
  EXPECT_EQ(d.total.added_bytes, 100u << 10);
  const std::string out = print_diff(a, b, d, print_options{});
  EXPECT_EQ(out, golden("diff.txt", out));
}

TEST(trace_diff, different_processes_share_no_allocation) {
  const auto a = sample_trace();
  auto b = sample_trace();
  b.info.pid = 4343;
  symbolizer sa(module_ranges(a)), sb(module_ranges(b));
  site_resolver ra(sa), rb(sb);
  const trace_diff d = build_trace_diff(a, ra, b, rb);
  EXPECT_FALSE(d.same_process);
  EXPECT_TRUE(d.is_valid());
  EXPECT_EQ(d.total.net_bytes(), 0);
  EXPECT_EQ(d.total.added_count, a.live.size());
  EXPECT_EQ(d.total.freed_count, a.live.size());
  trace_diff broken = d;
  broken.sites[0].added_bytes += 1;
  EXPECT_FALSE(broken.is_valid());
}

TEST(oom_report, holders_replayed_at_the_failure) {
  auto t = sample_trace();
  // Attach a snapshot sample to the OOM event (size2 = its seq).
  gmem::trace::stat_sample s;
  s.seq = 9;
  s.time_ns = 2500 * k_ms;
  s.reason = gmem::trace::sample_reason::oom;
  s.stats.reserved_bytes = 24 << 20;
  s.stats.live_bytes = 9 << 20;
  s.stats.free_bytes = 12 << 20;
  s.stats.largest_free_block = 3 << 20;
  s.stats.pending_bytes = 2 << 20;
  s.stats.limit_bytes = 32 << 20;
  s.stats.ooms = 1;
  t.samples.push_back(s);
  for (auto& e : t.events)
    if (e.type == event_type::oom) e.size2 = 9;
  t.devices[0].stats.ooms = 1;
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  const oom_report r = build_oom_report(t, sites);
  ASSERT_EQ(r.ooms.size(), 1u);
  const oom_entry& e = r.ooms[0];
  EXPECT_EQ(e.requested, 64u << 20);
  ASSERT_TRUE(e.at_failure.has_value());
  EXPECT_EQ(e.at_failure->limit_bytes, 32u << 20);
  EXPECT_TRUE(e.holders_exact);
  // At 2.5 s: stack 2's 8 MiB (its 2 MiB was freed at 2.0 s), stack 1's 4 x 250 KiB.
  ASSERT_EQ(e.holders.size(), 2u);
  EXPECT_EQ(e.holders[0].bytes, 8u << 20);
  EXPECT_EQ(e.holders[1].bytes, 4u * (250 << 10));
  EXPECT_EQ(e.held_bytes, (8u << 20) + 4u * (250 << 10));
  const std::string out = print_ooms(t, r, sites, print_options{});
  EXPECT_EQ(out, golden("oom.txt", out));
}

TEST(oom_report, none_recorded) {
  auto t = sample_trace();
  std::erase_if(t.events, [](const auto& e) { return e.type == event_type::oom; });
  symbolizer symbols(module_ranges(t));
  site_resolver sites(symbols);
  const oom_report r = build_oom_report(t, sites);
  EXPECT_TRUE(r.ooms.empty());
  EXPECT_NE(print_ooms(t, r, sites, print_options{}).find("No out-of-memory"), std::string::npos);
}

} // namespace
} // namespace gmem::tools
