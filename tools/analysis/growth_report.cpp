#include "tools/analysis/growth_report.h"

#include <algorithm>
#include <unordered_map>

#include "tools/analysis/trace_facts.h"

namespace gmem::tools {

bool growth_report::is_valid() const {
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const auto& s = sites[i];
    if (s.growth_bytes !=
        static_cast<std::int64_t>(s.new_live_bytes) - static_cast<std::int64_t>(s.freed_old_bytes))
      return false;
    if (s.new_live_bytes > s.live_bytes || s.new_live_count > s.live_count) return false;
    if (i > 0 && sites[i - 1].growth_bytes < s.growth_bytes) return false;
  }
  return from_ns <= now_ns;
}

growth_report build_growth_report(const gmem::trace::trace& t, site_resolver& sites,
                                  std::uint64_t window_ns, std::size_t top) {
  using gmem::trace::event_type;
  growth_report r;
  r.window_ns = window_ns;
  r.now_ns = trace_now_ns(t);
  r.from_ns = r.now_ns > window_ns ? r.now_ns - window_ns : 0;
  std::unordered_map<std::size_t, site_growth> by_site;
  auto at = [&](std::uint32_t stack_id, gmem::trace::alloc_kind kind) -> site_growth& {
    const std::size_t i = sites.site_of(t, stack_id, kind);
    site_growth& g = by_site[i];
    g.site = i;
    return g;
  };
  for (const auto& a : t.live) {
    site_growth& g = at(a.stack_id, a.kind);
    g.live_bytes += a.requested;
    ++g.live_count;
    if (a.time_ns >= r.from_ns) {
      g.new_live_bytes += a.requested;
      ++g.new_live_count;
    }
  }
  // Replay the ring: address (live_key: a tensor apart from its segment) -> (stack, time) of
  // its allocation, so a free inside the window
  // finds the site and age of what it freed.
  struct origin {
    std::uint32_t stack_id;
    std::uint64_t time_ns;
  };
  std::unordered_map<std::uintptr_t, origin> open;
  if (!t.events.empty()) r.oldest_event_ns = t.events.front().time_ns;
  // Complete when no lane lapped, or none lapped past the window's start.
  r.incomplete = r.from_ns > 0 && t.losses.history_from_ns > r.from_ns;
  if (t.events.empty() && t.losses.last_seq > 0) r.incomplete = true;
  for (const auto& e : t.events) {
    if (e.type == event_type::alloc) {
      open[gmem::trace::live_key(e.address, e.kind)] = {e.stack_id, e.time_ns};
      if (e.time_ns >= r.from_ns) ++at(e.stack_id, e.kind).allocs_in_window;
    } else if (e.type == event_type::free) {
      auto it = open.find(gmem::trace::live_key(e.address, e.kind));
      if (e.time_ns >= r.from_ns) {
        if (it == open.end()) {
          if (e.size2 != 0 || e.size != 0) { // a free the live table knew (not a foreign one)
            r.unknown_freed_bytes += e.size;
            ++r.unknown_freed_count;
          }
        } else if (it->second.time_ns < r.from_ns) {
          site_growth& g = at(it->second.stack_id, e.kind);
          g.freed_old_bytes += e.size;
          ++g.freed_old_count;
        }
      }
      if (it != open.end()) open.erase(it);
    }
  }
  if (r.unknown_freed_count > 0) r.incomplete = true;
  for (auto& [i, g] : by_site) {
    g.growth_bytes =
        static_cast<std::int64_t>(g.new_live_bytes) - static_cast<std::int64_t>(g.freed_old_bytes);
    if (g.live_count == 0 && g.allocs_in_window == 0 && g.freed_old_count == 0) continue;
    r.sites.push_back(g);
  }
  std::sort(r.sites.begin(), r.sites.end(), [&](const site_growth& a, const site_growth& b) {
    if (a.growth_bytes != b.growth_bytes) return a.growth_bytes > b.growth_bytes;
    if (a.live_bytes != b.live_bytes) return a.live_bytes > b.live_bytes;
    return sites.site(a.site).id < sites.site(b.site).id;
  });
  if (top != 0 && r.sites.size() > top) {
    r.hidden_sites = r.sites.size() - top;
    r.sites.resize(top);
  }
  return r;
}

} // namespace gmem::tools
