#include "tools/analysis/leak_report.h"

#include <algorithm>
#include <map>

#include "tools/analysis/trace_facts.h"

namespace gmem::tools {
namespace {

template <typename T> void add_unique(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

std::string print_key(const leak_site& s) {
  std::string key;
  for (const auto& f : s.frames)
    key += f.name() + '\x1f' + f.location() + '\x1e';
  return key;
}

void sort_sites(std::vector<leak_site>& sites) {
  std::sort(sites.begin(), sites.end(), site_before);
}

void sort_by_bytes(std::vector<leak_site>& sites) {
  // Deterministic order: bytes, then count, then the printed stack.
  std::sort(sites.begin(), sites.end(), [](const leak_site& a, const leak_site& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.count != b.count) return a.count > b.count;
    return print_key(a) < print_key(b);
  });
}

} // namespace

bool site_before(const leak_site& a, const leak_site& b) {
  if (a.trend.growing != b.trend.growing) return a.trend.growing;
  if (a.trend.growing && a.trend.window_growth_bytes != b.trend.window_growth_bytes)
    return a.trend.window_growth_bytes > b.trend.window_growth_bytes;
  if (a.bytes != b.bytes) return a.bytes > b.bytes;
  if (a.count != b.count) return a.count > b.count;
  return print_key(a) < print_key(b);
}

bool leak_report::is_valid() const {
  std::uint64_t b = 0, c = 0;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const auto& s = sites[i];
    if (s.count == 0 || s.oldest_age_ns < s.youngest_age_ns || s.rounded_bytes < s.bytes)
      return false;
    if (i > 0 && (by_bytes ? sites[i - 1].bytes < s.bytes : site_before(s, sites[i - 1])))
      return false;
    b += s.bytes;
    c += s.count;
  }
  return b == total_bytes && c == total_count && total_bytes <= all_bytes &&
         total_count <= all_count;
}

std::string site_summary(const std::vector<frame_info>& frames, std::size_t depth) {
  if (frames.empty()) return "(no stack recorded)";
  std::string s;
  for (std::size_t i = 0; i < frames.size() && i < depth; ++i) {
    // After a program's Python frames, the native frame shown is where the allocation went in
    // (the framework's allocator), not a caller of the outermost Python frame.
    if (i > 0 && frames[0].python && !frames[i].python) break;
    if (i > 0) s += "  <  ";
    s += frames[i].name();
    if (!frames[i].file.empty()) s += " at " + frames[i].location();
  }
  return s;
}

std::string site_summary(const leak_site& site, std::size_t depth) {
  if (!site.frames.empty()) return site_summary(site.frames, depth);
  if (site.note != gmem::trace::python_note::none) return "(" + describe(site.note) + ")";
  if (site.folded > 0) return "(runtime and interpreter internals only: --all-frames)";
  if (site.python_folded > 0) return "(frameworks' Python code only: --all-frames)";
  return site_summary(site.frames, depth);
}

leak_report build_leak_report(const gmem::trace::trace& trace, symbolizer& symbols,
                              const leak_filter& filter) {
  leak_report r;
  r.process_alive = trace.info.state == gmem::trace::trace_state::running && !trace.info.saved_file;
  r.incomplete = trace.losses.live_overflow > 0;
  r.native_ended = native_program_ended(trace);
  r.verdicts = filter.verdicts;
  const std::uint64_t now = trace_now_ns(trace);
  r.observed_frameworks = trace.info.observed_frameworks;
  // (stack id, kind) -> site (cached): a tensor's stack runs through its cache's code, but the
  // tensor is the program's; kind-qualified suppressions depend on the kind.
  std::map<std::pair<std::uint32_t, gmem::trace::alloc_kind>, std::size_t> site_of_stack;
  std::map<std::string, std::size_t> by_key;
  std::vector<leak_site> all;
  auto site_index = [&](std::uint32_t stack_id, gmem::trace::alloc_kind kind) -> std::size_t {
    auto k = site_of_stack.find({stack_id, kind});
    if (k != site_of_stack.end()) return k->second;
    shown_stack shown = show_stack(trace, stack_id, symbols, filter.view);
    std::string key = stack_key(shown);
    const suppression* why = nullptr;
    const framework_cache* cache = nullptr;
    if (filter.suppressions != nullptr || filter.framework_caches) {
      const auto every = all_frames(trace, stack_id, symbols);
      if (filter.suppressions)
        why = filter.suppressions->match(every, gmem::trace::to_string(kind));
      if (!why && filter.framework_caches && kind != gmem::trace::alloc_kind::tensor)
        cache = framework_cache_of(every, trace.info.options);
    }
    // One Python line may hold a leak, a workspace and a cache's segment: three sites.
    if (why) key.insert(0, "S" + why->pattern + '\x1f');
    if (cache) key.insert(0, std::string("C") + cache->cache + '\x1f');
    auto [it, fresh] = by_key.try_emplace(key, all.size());
    if (fresh) {
      leak_site s;
      s.frames = std::move(shown.frames);
      s.python_frames = shown.python_frames;
      s.folded = shown.folded;
      s.python_folded = shown.python_folded;
      s.note = shown.note;
      s.cache = cache;
      if (why) s.suppressed_by = "leak:" + why->pattern + " (" + why->origin + ")";
      all.push_back(std::move(s));
    }
    site_of_stack.emplace(std::pair{stack_id, kind}, it->second);
    return it->second;
  };
  // Every survivor and every allocation of the ring has its site: the verdict is the whole
  // run's, whatever the filters show.
  for (const auto& a : trace.live)
    site_index(a.stack_id, a.kind);
  for (const auto& e : trace.events)
    if (e.type == gmem::trace::event_type::alloc) site_index(e.stack_id, e.kind);
  const auto trends = site_trends(
      trace,
      [&](std::uint32_t stack_id, gmem::trace::alloc_kind kind) {
        return site_of_stack.at({stack_id, kind});
      },
      all.size());
  for (const auto& a : trace.live) {
    r.all_bytes += a.requested;
    ++r.all_count;
    const std::uint64_t age = now > a.time_ns ? now - a.time_ns : 0;
    if (age < filter.min_age_ns || (filter.max_age_ns != 0 && age > filter.max_age_ns) ||
        a.time_ns < filter.min_time_ns)
      continue;
    leak_site& s = all[site_of_stack.at({a.stack_id, a.kind})];
    // The cache's tensors: what the program holds of it (a library's workspace that the cache
    // served is suppressed with its segment, and counted in neither).
    if (a.kind == gmem::trace::alloc_kind::tensor && s.suppressed_by.empty())
      r.tensor_bytes += a.requested, ++r.tensor_count;
    if (s.count == 0 || age > s.oldest_age_ns) s.oldest_age_ns = age;
    if (s.count == 0 || age < s.youngest_age_ns) s.youngest_age_ns = age;
    s.bytes += a.requested;
    s.rounded_bytes += a.rounded;
    ++s.count;
    if (a.held) {
      ++s.held_count;
      s.held_bytes += a.requested;
    }
    add_unique(s.devices, a.device);
    add_unique(s.kinds, std::string(gmem::trace::to_string(a.kind)));
  }
  std::vector<leak_site> leaks;
  for (std::size_t i = 0; i < all.size(); ++i) {
    leak_site& s = all[i];
    if (s.count == 0) continue;
    s.trend = trends[i];
    std::sort(s.devices.begin(), s.devices.end());
    if (!s.suppressed_by.empty()) {
      s.verdict = leak_verdict::suppressed;
      r.suppressed_bytes += s.bytes;
      r.suppressed_count += s.count;
      r.suppressed.push_back(std::move(s));
      continue;
    }
    if (s.cache != nullptr) {
      s.verdict = leak_verdict::framework_cache;
      r.cached_bytes += s.bytes;
      r.cached_count += s.count;
      r.cached.push_back(std::move(s));
      continue;
    }
    if (s.bytes < filter.min_bytes) {
      ++r.hidden_sites;
      continue;
    }
    s.verdict = verdict_of(s.trend, r.native_ended);
    const bool listed =
        filter.verdicts == leak_filter::show::all ||
        (s.verdict == leak_verdict::leak) == (filter.verdicts == leak_filter::show::leaks);
    (listed ? leaks : r.held_sites).push_back(std::move(s));
  }
  r.sites = std::move(leaks);
  r.by_bytes = filter.by_bytes;
  if (filter.by_bytes)
    sort_by_bytes(r.sites);
  else
    sort_sites(r.sites);
  sort_sites(r.held_sites);
  sort_by_bytes(r.suppressed);
  sort_by_bytes(r.cached);
  for (const auto& s : r.cached)
    add_unique(r.caches, s.cache);
  if (filter.top != 0 && r.sites.size() > filter.top) {
    r.hidden_sites += r.sites.size() - filter.top;
    r.sites.resize(filter.top);
  }
  for (const auto& s : r.sites) {
    r.total_bytes += s.bytes;
    r.total_count += s.count;
    r.held_bytes += s.held_bytes;
    r.held_count += s.held_count;
  }
  for (const auto& s : r.held_sites) {
    r.held_sites_bytes += s.bytes;
    r.held_sites_count += s.count;
  }
  return r;
}

} // namespace gmem::tools
