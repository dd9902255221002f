#include "tools/analysis/oom_report.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace gmem::tools {
namespace {

struct held {
  std::uint32_t stack_id;
  std::uint64_t bytes;
  int device;
  gmem::trace::alloc_kind kind;
};

std::vector<oom_holder> top_holders(const gmem::trace::trace& t, site_resolver& sites,
                                    const std::unordered_map<std::uintptr_t, held>& live,
                                    int device, std::size_t top, std::uint64_t* total) {
  std::map<std::size_t, oom_holder> by_site;
  *total = 0;
  for (const auto& [addr, h] : live) {
    if (h.device != device) continue;
    oom_holder& o = by_site[sites.site_of(t, h.stack_id, h.kind)];
    o.bytes += h.bytes;
    ++o.count;
    *total += h.bytes;
  }
  std::vector<oom_holder> v;
  for (auto& [i, o] : by_site) {
    o.site = i;
    v.push_back(o);
  }
  std::sort(v.begin(), v.end(), [&](const oom_holder& a, const oom_holder& b) {
    if (a.bytes != b.bytes) return a.bytes > b.bytes;
    return sites.site(a.site).id < sites.site(b.site).id;
  });
  if (v.size() > top) v.resize(top);
  return v;
}

} // namespace

oom_report build_oom_report(const gmem::trace::trace& t, site_resolver& sites, std::size_t top) {
  using gmem::trace::event_type;
  oom_report r;
  for (const auto& d : t.devices)
    r.counted_ooms += d.stats.ooms;
  const bool complete = !t.events.empty() && t.losses.history_from_ns == 0; // nothing lapped
  std::unordered_map<std::uintptr_t, held> live; // replayed from the ring
  for (const auto& e : t.events) {
    if (e.type == event_type::alloc) {
      live[gmem::trace::live_key(e.address, e.kind)] = {e.stack_id, e.size, e.device, e.kind};
    } else if (e.type == event_type::free) {
      live.erase(gmem::trace::live_key(e.address, e.kind));
    } else if (e.type == event_type::oom) {
      oom_entry o;
      o.seq = e.seq;
      o.time_ns = e.time_ns;
      o.device = e.device;
      o.thread = e.thread;
      o.requested = e.size;
      if (e.size2 != 0) {
        auto s = std::lower_bound(
            t.samples.begin(), t.samples.end(), e.size2,
            [](const gmem::trace::stat_sample& x, std::uint64_t seq) { return x.seq < seq; });
        if (s != t.samples.end() && s->seq == e.size2) o.at_failure = s->stats;
      }
      o.holders_exact = complete;
      if (complete) {
        o.holders = top_holders(t, sites, live, e.device, top, &o.held_bytes);
      } else {
        std::unordered_map<std::uintptr_t, held> before;
        for (const auto& a : t.live)
          if (a.time_ns <= e.time_ns)
            before[gmem::trace::live_key(a.address, a.kind)] = {a.stack_id, a.requested, a.device,
                                                                a.kind};
        o.holders = top_holders(t, sites, before, e.device, top, &o.held_bytes);
      }
      r.ooms.push_back(std::move(o));
    }
  }
  return r;
}

} // namespace gmem::tools
