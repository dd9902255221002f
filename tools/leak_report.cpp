#include "tools/leak_report.h"

#include <algorithm>
#include <map>

#include "tools/trace_facts.h"

namespace gmem::tools {
namespace {

bool is_shim_frame(const frame_info& f) {
  const auto slash = f.module.rfind('/');
  const std::string base = slash == std::string::npos ? f.module : f.module.substr(slash + 1);
  return base.rfind("libgmem", 0) == 0 || base.rfind("libunwind", 0) == 0;
}

// Symbolized identity of a stack: two stack ids that print the same are one call site.
std::string site_key(const std::vector<frame_info>& frames) {
  std::string key;
  for (const auto& f : frames)
    key += f.name() + '\x1f' + f.location() + '\x1e';
  return key;
}

template <typename T> void add_unique(std::vector<T>& v, const T& x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

} // namespace

std::vector<frame_info> visible_frames(const std::vector<std::uint64_t>& ips, symbolizer& symbols) {
  std::vector<frame_info> frames;
  frames.reserve(ips.size());
  for (const auto ip : ips)
    frames.push_back(symbols.resolve(ip));
  std::size_t skip = 0;
  while (skip < frames.size() && is_shim_frame(frames[skip]))
    ++skip;
  if (skip == frames.size()) skip = 0; // nothing else recorded: show what there is
  frames.erase(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(skip));
  return frames;
}

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

leak_report build_leak_report(const gmem::trace::trace& trace, symbolizer& symbols,
                              const leak_filter& filter) {
  leak_report r;
  r.process_alive = trace.info.state == gmem::trace::trace_state::running && !trace.info.saved_file;
  r.incomplete = trace.losses.live_overflow > 0;
  const std::uint64_t now = trace_now_ns(trace);
  std::map<std::uint32_t, std::string> key_of_stack; // stack id -> site key (cached)
  std::map<std::string, leak_site> by_key;
  for (const auto& a : trace.live) {
    r.all_bytes += a.requested;
    ++r.all_count;
    const std::uint64_t age = now > a.time_ns ? now - a.time_ns : 0;
    if (age < filter.min_age_ns) continue;
    auto k = key_of_stack.find(a.stack_id);
    if (k == key_of_stack.end()) {
      std::vector<frame_info> frames;
      if (const auto* ips = trace.stack(a.stack_id)) frames = visible_frames(*ips, symbols);
      std::string key = site_key(frames);
      k = key_of_stack.emplace(a.stack_id, key).first;
      by_key.try_emplace(key).first->second.frames = std::move(frames);
    }
    leak_site& s = by_key[k->second];
    if (s.count == 0 || age > s.oldest_age_ns) s.oldest_age_ns = age;
    if (s.count == 0 || age < s.youngest_age_ns) s.youngest_age_ns = age;
    s.bytes += a.requested;
    s.rounded_bytes += a.rounded;
    ++s.count;
    add_unique(s.devices, a.device);
    add_unique(s.kinds, std::string(gmem::trace::to_string(a.kind)));
  }
  for (auto& [key, s] : by_key) {
    if (s.count == 0) continue;
    std::sort(s.devices.begin(), s.devices.end());
    if (s.bytes < filter.min_bytes) {
      ++r.hidden_sites;
      continue;
    }
    r.sites.push_back(std::move(s));
  }
  // Deterministic order: bytes, then count, then the printed stack.
  std::sort(r.sites.begin(), r.sites.end(), [](const leak_site& a, const leak_site& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    if (a.count != b.count) return a.count > b.count;
    return site_key(a.frames) < site_key(b.frames);
  });
  if (filter.top != 0 && r.sites.size() > filter.top) {
    r.hidden_sites += r.sites.size() - filter.top;
    r.sites.resize(filter.top);
  }
  for (const auto& s : r.sites) {
    r.total_bytes += s.bytes;
    r.total_count += s.count;
  }
  return r;
}

} // namespace gmem::tools
