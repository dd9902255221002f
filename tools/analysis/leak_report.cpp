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
  // Deterministic order: bytes, then count, then the printed stack.
  std::sort(sites.begin(), sites.end(), [](const leak_site& a, const leak_site& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.count != b.count) return a.count > b.count;
    return print_key(a) < print_key(b);
  });
}

} // namespace

bool leak_report::is_valid() const {
  std::uint64_t b = 0, c = 0;
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const auto& s = sites[i];
    if (s.count == 0 || s.oldest_age_ns < s.youngest_age_ns || s.rounded_bytes < s.bytes)
      return false;
    if (i > 0 && sites[i - 1].bytes < s.bytes) return false;
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
  const std::uint64_t now = trace_now_ns(trace);
  r.observed_frameworks = trace.info.observed_frameworks;
  // (stack id, kind) -> site key (cached): a tensor's stack runs through its cache's code, but
  // the tensor is the program's; kind-qualified suppressions depend on the kind.
  std::map<std::pair<std::uint32_t, gmem::trace::alloc_kind>, std::string> key_of_stack;
  std::map<std::string, leak_site> by_key;
  for (const auto& a : trace.live) {
    r.all_bytes += a.requested;
    ++r.all_count;
    const bool tensor = a.kind == gmem::trace::alloc_kind::tensor;
    const std::uint64_t age = now > a.time_ns ? now - a.time_ns : 0;
    if (age < filter.min_age_ns || (filter.max_age_ns != 0 && age > filter.max_age_ns) ||
        a.time_ns < filter.min_time_ns)
      continue;
    auto k = key_of_stack.find({a.stack_id, a.kind});
    if (k == key_of_stack.end()) {
      shown_stack shown = show_stack(trace, a.stack_id, symbols, filter.view);
      std::string key = stack_key(shown);
      const suppression* why = nullptr;
      const framework_cache* cache = nullptr;
      if (filter.suppressions != nullptr || filter.framework_caches) {
        const auto every = all_frames(trace, a.stack_id, symbols);
        if (filter.suppressions)
          why = filter.suppressions->match(every, gmem::trace::to_string(a.kind));
        if (!why && filter.framework_caches && !tensor)
          cache = framework_cache_of(every, trace.info.options);
      }
      // One Python line may hold a leak, a workspace and a cache's segment: three sites.
      if (why) key.insert(0, "S" + why->pattern + '\x1f');
      if (cache) key.insert(0, std::string("C") + cache->cache + '\x1f');
      k = key_of_stack.emplace(std::pair{a.stack_id, a.kind}, key).first;
      if (auto [it, fresh] = by_key.try_emplace(key); fresh) {
        it->second.frames = std::move(shown.frames);
        it->second.python_frames = shown.python_frames;
        it->second.folded = shown.folded;
        it->second.python_folded = shown.python_folded;
        it->second.note = shown.note;
        it->second.cache = cache;
        if (why) it->second.suppressed_by = "leak:" + why->pattern + " (" + why->origin + ")";
      }
    }
    leak_site& s = by_key[k->second];
    // The cache's tensors: what the program holds of it (a library's workspace that the cache
    // served is suppressed with its segment, and counted in neither).
    if (tensor && s.suppressed_by.empty()) r.tensor_bytes += a.requested, ++r.tensor_count;
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
  for (auto& [key, s] : by_key) {
    if (s.count == 0) continue;
    std::sort(s.devices.begin(), s.devices.end());
    if (!s.suppressed_by.empty()) {
      r.suppressed_bytes += s.bytes;
      r.suppressed_count += s.count;
      r.suppressed.push_back(std::move(s));
      continue;
    }
    if (s.cache != nullptr) {
      r.cached_bytes += s.bytes;
      r.cached_count += s.count;
      r.cached.push_back(std::move(s));
      continue;
    }
    if (s.bytes < filter.min_bytes) {
      ++r.hidden_sites;
      continue;
    }
    r.sites.push_back(std::move(s));
  }
  sort_sites(r.sites);
  sort_sites(r.suppressed);
  sort_sites(r.cached);
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
  return r;
}

} // namespace gmem::tools
