#include "tools/analysis/timeline.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "tools/analysis/trace_facts.h"

namespace gmem::tools {

bool is_pooled_kind(gmem::trace::alloc_kind kind) {
  using gmem::trace::alloc_kind;
  return kind == alloc_kind::device || kind == alloc_kind::async || kind == alloc_kind::host_pinned;
}

bool is_graph_kind(gmem::trace::alloc_kind kind) {
  return kind == gmem::trace::alloc_kind::capture;
}

const char* to_string(mark_kind k) {
  switch (k) {
  case mark_kind::marker:
    return "marker";
  case mark_kind::oom:
    return "oom";
  case mark_kind::fence:
    return "fence";
  case mark_kind::trim:
    return "trim";
  }
  return "?";
}

timeline build_timeline(const gmem::trace::trace& trace) {
  using gmem::trace::event_type;
  timeline t;
  t.lost_events = trace.losses.lost_events > 0;
  struct values {
    std::int64_t live = 0, reserved = 0, graph = 0;
  };
  struct state : values {
    std::vector<std::pair<std::uint64_t, values>> raw;
  };
  std::map<int, state> dev;
  struct block {
    std::uint64_t bytes;
    int device;
  };
  std::unordered_map<std::uint64_t, block> blocks;   // address -> live pooled block
  std::unordered_map<std::uint64_t, block> segments; // base -> segment
  std::unordered_map<std::uint64_t, block> graphs;   // address -> live graph allocation
  std::vector<const gmem::trace::event*> events;
  for (const auto& e : trace.events)
    events.push_back(&e);
  std::stable_sort(events.begin(), events.end(),
                   [](const auto* a, const auto* b) { return a->seq < b->seq; });
  t.begin_ns = events.empty() ? 0 : events.front()->time_ns;
  for (const auto* e : events) {
    // A pool exists only where memory changed: a marker or option event with some device id
    // does not make one (a hostile trace could name thousands).
    auto s_of = [&dev, e]() -> state& { return dev[e->device]; };
    bool changed = true;
    switch (e->type) {
    case event_type::alloc:
      if (is_graph_kind(e->kind)) {
        graphs[e->address] = {std::max(e->size2, e->size), e->device};
        s_of().graph += static_cast<std::int64_t>(std::max(e->size2, e->size));
        break;
      }
      if (!is_pooled_kind(e->kind)) {
        changed = false;
        break;
      }
      blocks[e->address] = {std::max(e->size2, e->size), e->device};
      s_of().live += static_cast<std::int64_t>(std::max(e->size2, e->size));
      break;
    case event_type::free: {
      const auto it = blocks.find(e->address);
      if (const auto g = graphs.find(e->address); g != graphs.end()) {
        dev[g->second.device].graph -= static_cast<std::int64_t>(g->second.bytes);
        graphs.erase(g);
      } else if (it != blocks.end()) {
        dev[it->second.device].live -= static_cast<std::int64_t>(it->second.bytes);
        blocks.erase(it);
      } else if (is_pooled_kind(e->kind) && e->size2 != 0) {
        s_of().live -= static_cast<std::int64_t>(e->size2); // allocated before the ring's window
      } else {
        changed = false;
      }
      break;
    }
    case event_type::segment_map:
      segments[e->address] = {e->size, e->device};
      s_of().reserved += static_cast<std::int64_t>(e->size);
      break;
    case event_type::segment_unmap: {
      const auto it = segments.find(e->address);
      s_of().reserved -=
          static_cast<std::int64_t>(it != segments.end() ? it->second.bytes : e->size);
      if (it != segments.end()) segments.erase(it);
      break;
    }
    case event_type::oom:
      t.marks.push_back({e->time_ns, e->device, mark_kind::oom, {}, e->size, 0});
      changed = false;
      break;
    case event_type::fence:
      t.marks.push_back({e->time_ns, e->device, mark_kind::fence, {}, e->size, e->size2});
      changed = false;
      break;
    case event_type::trim:
      t.marks.push_back({e->time_ns, e->device, mark_kind::trim, {}, e->size, 0});
      changed = false;
      break;
    case event_type::marker:
      t.marks.push_back({e->time_ns, e->device, mark_kind::marker, e->label, 0, 0});
      changed = false;
      break;
    case event_type::option:
      changed = false;
      break;
    }
    if (changed) {
      state& d = dev[e->device];
      d.raw.push_back({e->time_ns, d});
    }
    t.end_ns = std::max(t.end_ns, e->time_ns);
  }
  t.end_ns = std::max(t.end_ns, trace_now_ns(trace));
  // Anchor each curve at the present state.
  std::map<int, values> present;
  for (const auto& a : trace.live) {
    const auto bytes = static_cast<std::int64_t>(std::max(a.rounded, a.requested));
    if (is_pooled_kind(a.kind)) present[a.device].live += bytes;
    if (is_graph_kind(a.kind)) present[a.device].graph += bytes;
  }
  for (const auto& s : trace.segments)
    present[s.device].reserved += static_cast<std::int64_t>(s.bytes);
  for (const auto& [d, p] : present)
    dev[d];
  for (auto& [d, s] : dev) {
    const values now = present[d];
    const std::int64_t shift_live = now.live - s.live, shift_res = now.reserved - s.reserved,
                       shift_graph = now.graph - s.graph;
    device_timeline dt;
    dt.device = d;
    auto clamp = [](std::int64_t v) {
      return static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0));
    };
    dt.points.push_back({t.begin_ns, clamp(shift_live), clamp(shift_res), clamp(shift_graph)});
    for (const auto& [time, v] : s.raw)
      dt.points.push_back({time, clamp(v.live + shift_live), clamp(v.reserved + shift_res),
                           clamp(v.graph + shift_graph)});
    dt.points.push_back({t.end_ns, clamp(now.live), clamp(now.reserved), clamp(now.graph)});
    for (const auto& p : dt.points) {
      dt.peak_live = std::max(dt.peak_live, p.live);
      dt.peak_reserved = std::max(dt.peak_reserved, p.reserved);
      dt.peak_graph = std::max(dt.peak_graph, p.graph);
    }
    t.devices.push_back(std::move(dt));
  }
  return t;
}

} // namespace gmem::tools
