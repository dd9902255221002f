#include "tools/prometheus/fleet_metrics.h"

#include <algorithm>
#include <bit>
#include <set>

#include "common/escape.h"
#include "tools/analysis/growth_report.h"
#include "tools/analysis/leak_verdict.h"
#include "tools/analysis/trace_facts.h"

namespace gmem::tools {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricType;
using label_list = std::vector<ClientMetric::Label>;

struct family_def {
  const char* name;
  MetricType type;
  const char* help;
};

// The exported families, in output order. docs/monitoring.md lists the same.
constexpr family_def k_families[] = {
    {"gmem_process_info", MetricType::Gauge,
     "1 per traced process; state is running, exited or crashed"},
    {"gmem_process_running", MetricType::Gauge, "1 while the traced process runs, else 0"},
    {"gmem_process_end_time_seconds", MetricType::Gauge,
     "Unix time when the process exited or was last seen (0 while it runs)"},
    {"gmem_live_bytes", MetricType::Gauge, "bytes in live blocks (rounded sizes)"},
    {"gmem_live_requested_bytes", MetricType::Gauge, "bytes the program asked for in live blocks"},
    {"gmem_reserved_bytes", MetricType::Gauge, "bytes in segments obtained from the driver"},
    {"gmem_peak_live_bytes", MetricType::Gauge, "highest live bytes since start"},
    {"gmem_peak_reserved_bytes", MetricType::Gauge, "highest reserved bytes since start"},
    {"gmem_cached_free_bytes", MetricType::Gauge,
     "bytes in free blocks safe for every stream (cached by the pool)"},
    {"gmem_pending_bytes", MetricType::Gauge, "bytes freed without a stream, waiting for a fence"},
    {"gmem_fragmentation_ratio", MetricType::Gauge,
     "1 - largest free block / cached free bytes (0: one block, near 1: scattered)"},
    {"gmem_largest_free_block_bytes", MetricType::Gauge,
     "largest free block safe for every stream: the largest request served without growing"},
    {"gmem_limit_bytes", MetricType::Gauge, "memory limit of the pool (0 = none)"},
    {"gmem_allocations_total", MetricType::Counter, "successful allocations"},
    {"gmem_frees_total", MetricType::Counter, "successful frees"},
    {"gmem_allocation_rate", MetricType::Gauge,
     "allocations per second between the last two counter samples (0 once the process ended)"},
    {"gmem_cache_hits_total", MetricType::Counter,
     "allocations served without mapping a new segment"},
    {"gmem_cache_hit_ratio", MetricType::Gauge, "cache hits / allocations since start"},
    {"gmem_fences_total", MetricType::Counter, "fences completed"},
    {"gmem_oom_errors_total", MetricType::Counter, "allocations that failed with out of memory"},
    {"gmem_segments", MetricType::Gauge, "segments currently mapped"},
    {"gmem_site_live_bytes", MetricType::Gauge,
     "outstanding bytes (requested) of a call site; top K sites by live bytes or growth; label "
     "verdict: leak, held or framework_cache (gmem leaks)"},
    {"gmem_site_live_allocations", MetricType::Gauge, "outstanding allocations of a call site"},
    {"gmem_site_growth_bytes", MetricType::Gauge,
     "growth of a call site's outstanding bytes over the growth window (negative: shrank)"},
    {"gmem_framework_cache_bytes", MetricType::Gauge,
     "outstanding bytes (requested) held by a framework's own caching allocator (PyTorch, CuPy, "
     "XLA): its cached segments, not the program's tensors; not leaks"},
    {"gmem_site_growth_window_seconds", MetricType::Gauge,
     "window the growth of this process's sites covers (shorter than asked when the trace "
     "is younger or lost older events)"},
    {"gmem_trace_lost_events_total", MetricType::Counter,
     "events the trace ring lost (a slow or absent reader); growth may be incomplete"},
    {"gmem_trace_cut_sections", MetricType::Gauge,
     "sections of the trace the scrape's bounded read (--max-object-bytes) cut or left out: "
     "series that need them are missing or partial; only for a process whose read was cut"},
    {"gmem_exporter_traces", MetricType::Gauge,
     "trace objects seen in /dev/shm by the last scrape, by outcome"},
    {"gmem_exporter_last_scrape_duration_seconds", MetricType::Gauge,
     "time the previous scrape took to read and analyse every trace"},
    {"gmem_exporter_scrapes_total", MetricType::Counter, "scrapes served"},
};

std::string device_label(int device) {
  return device < 0 ? "host" : std::to_string(device);
}

double as_double(std::uint64_t v) {
  return static_cast<double>(v);
}

// Allocations per second between the last two samples of `device` (0 with fewer than two).
double allocation_rate(const gmem::trace::trace& t, int device) {
  const gmem::trace::stat_sample* last = nullptr;
  const gmem::trace::stat_sample* prev = nullptr;
  for (auto it = t.samples.rbegin(); it != t.samples.rend() && prev == nullptr; ++it) {
    if (it->device != device) continue;
    (last == nullptr ? last : prev) = &*it;
  }
  if (last == nullptr || prev == nullptr || last->time_ns <= prev->time_ns ||
      last->stats.total_allocs < prev->stats.total_allocs)
    return 0.0;
  return as_double(last->stats.total_allocs - prev->stats.total_allocs) * 1e9 /
         as_double(last->time_ns - prev->time_ns);
}

} // namespace

namespace {
// escape_text(), cut to at most `max` bytes at a character boundary.
std::string cut_label(std::string_view raw, std::size_t max) {
  std::string s = escape_text(raw);
  if (s.size() > max) {
    std::size_t n = max;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80)
      --n;
    s.resize(n);
  }
  return s;
}
} // namespace

std::string command_label(const std::string& command_line) {
  return cut_label(command_line, 100);
}

std::string exe_label(std::string_view exe) {
  constexpr std::string_view k_deleted = " (deleted)";
  if (exe.size() > k_deleted.size() && exe.substr(exe.size() - k_deleted.size()) == k_deleted)
    exe.remove_suffix(k_deleted.size());
  if (const auto slash = exe.rfind('/'); slash != std::string_view::npos)
    exe = exe.substr(slash + 1);
  return cut_label(exe, 100);
}

std::string_view executable_path(const gmem::trace::trace& t, const process_owner& owner) {
  if (!owner.exe.empty()) return owner.exe;
  // The recorder names the main program, its first module, by its /proc/self/exe.
  return t.modules.empty() ? std::string_view() : std::string_view(t.modules.front().path);
}

fleet_metrics::fleet_metrics() {
  for (const auto& f : k_families) {
    prometheus::MetricFamily m;
    m.name = f.name;
    m.help = f.help;
    m.type = f.type;
    index_.emplace(f.name, families_.size());
    families_.push_back(std::move(m));
  }
}

ClientMetric& fleet_metrics::sample(const char* family, label_list labels, double value) {
  prometheus::MetricFamily& f = families_[index_.at(family)];
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  f.metric.push_back(std::move(m));
  ++series_;
  return f.metric.back();
}

void fleet_metrics::add_process(const gmem::trace::trace& t, site_resolver* sites,
                                const process_owner& owner, const exporter_options& options) {
  const auto& i = t.info;
  const bool running = i.state == gmem::trace::trace_state::running && !i.saved_file;
  // (uid, pid, start_time) names one process; the collector exports one object per triple.
  label_list proc = {{"pid", std::to_string(i.pid)},
                     {"uid", std::to_string(owner.uid)},
                     {"user", cut_label(owner.user, 64)},
                     {"exe", exe_label(executable_path(t, owner))},
                     {"start_time", std::to_string(i.start_realtime_ns / 1'000'000'000u)}};
  if (owner.details && owner.command_line)
    proc.push_back({"command", command_label(i.command_line)});
  auto with = [&](std::initializer_list<ClientMetric::Label> extra) {
    label_list l = proc;
    l.insert(l.end(), extra.begin(), extra.end());
    return l;
  };
  sample("gmem_process_info", with({{"state", gmem::trace::to_string(i.state)}}), 1);
  sample("gmem_process_running", proc, running ? 1 : 0);
  const std::uint64_t end_ns =
      running ? 0 : (i.exit_realtime_ns != 0 ? i.exit_realtime_ns : i.heartbeat_realtime_ns);
  sample("gmem_process_end_time_seconds", proc, as_double(end_ns) / 1e9);
  sample("gmem_trace_lost_events_total", proc, as_double(t.losses.lost_events));
  if (i.cut_sections != 0) sample("gmem_trace_cut_sections", proc, std::popcount(i.cut_sections));
  for (const auto& d : t.devices) {
    const label_list dl = with({{"device", device_label(d.device)}});
    const pool_stats& s = d.stats;
    sample("gmem_live_bytes", dl, as_double(s.live_bytes));
    sample("gmem_live_requested_bytes", dl, as_double(s.live_requested_bytes));
    sample("gmem_reserved_bytes", dl, as_double(s.reserved_bytes));
    sample("gmem_peak_live_bytes", dl, as_double(s.peak_live_bytes));
    sample("gmem_peak_reserved_bytes", dl, as_double(s.peak_reserved_bytes));
    sample("gmem_cached_free_bytes", dl, as_double(s.free_bytes));
    sample("gmem_pending_bytes", dl, as_double(s.pending_bytes));
    sample("gmem_fragmentation_ratio", dl, s.fragmentation());
    sample("gmem_largest_free_block_bytes", dl, as_double(s.largest_free_block));
    sample("gmem_limit_bytes", dl, as_double(s.limit_bytes));
    sample("gmem_allocations_total", dl, as_double(s.total_allocs));
    sample("gmem_frees_total", dl, as_double(s.total_frees));
    sample("gmem_allocation_rate", dl, running ? allocation_rate(t, d.device) : 0.0);
    sample("gmem_cache_hits_total", dl, as_double(s.cache_hits));
    sample("gmem_cache_hit_ratio", dl,
           s.total_allocs == 0 ? 0.0 : as_double(s.cache_hits) / as_double(s.total_allocs));
    sample("gmem_fences_total", dl, as_double(s.fences));
    sample("gmem_oom_errors_total", dl, as_double(s.ooms));
    sample("gmem_segments", dl, as_double(s.segments));
  }
  if (options.top_sites == 0 || !owner.details || sites == nullptr) return;
  growth_report g = build_growth_report(t, *sites, options.growth_window_ns);
  const std::uint64_t covered = g.incomplete && g.oldest_event_ns > g.from_ns
                                    ? g.now_ns - g.oldest_event_ns
                                    : g.now_ns - g.from_ns;
  sample("gmem_site_growth_window_seconds", proc, as_double(covered) / 1e9);
  // The union of the top K by growth (g.sites is sorted by it) and the top K by live bytes.
  std::set<std::size_t> chosen;
  for (std::size_t k = 0; k < g.sites.size() && k < options.top_sites; ++k)
    if (g.sites[k].growth_bytes > 0) chosen.insert(k);
  std::vector<std::size_t> by_live(g.sites.size());
  for (std::size_t k = 0; k < by_live.size(); ++k)
    by_live[k] = k;
  std::stable_sort(by_live.begin(), by_live.end(), [&](std::size_t a, std::size_t b) {
    return g.sites[a].live_bytes > g.sites[b].live_bytes;
  });
  for (std::size_t k = 0; k < by_live.size() && k < options.top_sites; ++k)
    if (g.sites[by_live[k]].live_bytes > 0) chosen.insert(by_live[k]);
  // What frameworks' caches hold, per cache: a reader of gmem_site_live_bytes sees those sites
  // labelled held_by, and here their sum.
  std::vector<std::pair<const framework_cache*, std::uint64_t>> held;
  for (const site_growth& s : g.sites) {
    const framework_cache* c = sites->site(s.site).held_by;
    if (c == nullptr) continue;
    auto it = std::find_if(held.begin(), held.end(), [&](const auto& h) { return h.first == c; });
    if (it == held.end()) it = held.insert(held.end(), {c, 0});
    it->second += s.live_bytes;
  }
  for (const auto& [c, bytes] : held)
    sample("gmem_framework_cache_bytes", with({{"framework", c->framework}, {"cache", c->cache}}),
           as_double(bytes));
  // Each site's verdict (leak_verdict.h), as gmem leaks gives it: the growth report resolved
  // every site of the live table and the ring, so the resolver numbers them all.
  const std::vector<site_trend> trends = site_trends(
      t,
      [&](std::uint32_t stack_id, gmem::trace::alloc_kind kind) {
        return sites->site_of(t, stack_id, kind);
      },
      sites->size());
  const bool native_ended = native_program_ended(t);
  for (const std::size_t k : chosen) {
    const site_growth& s = g.sites[k];
    const call_site& cs = sites->site(s.site);
    label_list sl = with({{"site", cs.id}, {"frame", cs.label}, {"caller", cs.caller}});
    if (cs.held_by != nullptr) sl.push_back({"held_by", cs.held_by->cache});
    sl.push_back({"verdict", cs.held_by != nullptr
                                 ? to_string(leak_verdict::framework_cache)
                                 : to_string(verdict_of(trends[s.site], native_ended))});
    sample("gmem_site_live_bytes", sl, as_double(s.live_bytes));
    sample("gmem_site_live_allocations", sl, as_double(s.live_count));
    sample("gmem_site_growth_bytes", sl, static_cast<double>(s.growth_bytes));
  }
}

void fleet_metrics::add_health(const scrape_health& h) {
  auto outcome = [&](const char* what, std::uint64_t n) {
    sample("gmem_exporter_traces", {{"outcome", what}}, as_double(n));
  };
  outcome("found", h.traces_found);
  outcome("exported", h.exported);
  outcome("unreadable", h.skipped_unreadable);
  outcome("bad", h.skipped_bad);
  outcome("ended_long_ago", h.skipped_old);
  outcome("over_limit", h.skipped_limit);
  outcome("vanished", h.vanished);
  outcome("duplicate", h.duplicate);
  outcome("over_budget", h.over_budget);
  sample("gmem_exporter_last_scrape_duration_seconds", {}, h.last_scrape_seconds);
  sample("gmem_exporter_scrapes_total", {}, as_double(h.scrapes));
}

std::vector<prometheus::MetricFamily> fleet_metrics::take() {
  std::vector<prometheus::MetricFamily> out;
  for (auto& f : families_)
    if (!f.metric.empty()) out.push_back(std::move(f));
  families_.clear();
  index_.clear();
  return out;
}

} // namespace gmem::tools
