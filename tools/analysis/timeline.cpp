#include "tools/analysis/timeline.h"

#include <cstdint>
#include <limits>

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

namespace {

// Byte counts from a trace may be anything its writer chose: sums saturate instead of
// overflowing (undefined behaviour for the signed counters below).
std::int64_t sat_add(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (!__builtin_add_overflow(a, b, &r)) return r;
  return b > 0 ? std::numeric_limits<std::int64_t>::max()
               : std::numeric_limits<std::int64_t>::min();
}
std::int64_t sat_sub(std::int64_t a, std::int64_t b) {
  std::int64_t r = 0;
  if (!__builtin_sub_overflow(a, b, &r)) return r;
  return b < 0 ? std::numeric_limits<std::int64_t>::max()
               : std::numeric_limits<std::int64_t>::min();
}
void add_to(std::int64_t& a, std::uint64_t bytes) {
  a = sat_add(a, static_cast<std::int64_t>(std::min<std::uint64_t>(bytes, INT64_MAX)));
}
void sub_from(std::int64_t& a, std::uint64_t bytes) {
  a = sat_sub(a, static_cast<std::int64_t>(std::min<std::uint64_t>(bytes, INT64_MAX)));
}

} // namespace

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
        add_to(s_of().graph, std::max(e->size2, e->size));
        break;
      }
      if (!is_pooled_kind(e->kind)) {
        changed = false;
        break;
      }
      blocks[e->address] = {std::max(e->size2, e->size), e->device};
      add_to(s_of().live, std::max(e->size2, e->size));
      break;
    case event_type::free: {
      if (e->kind == gmem::trace::alloc_kind::tensor) { // inside a block counted already
        changed = false;
        break;
      }
      const auto it = blocks.find(e->address);
      if (const auto g = graphs.find(e->address); g != graphs.end()) {
        sub_from(dev[g->second.device].graph, g->second.bytes);
        graphs.erase(g);
      } else if (it != blocks.end()) {
        sub_from(dev[it->second.device].live, it->second.bytes);
        blocks.erase(it);
      } else if (is_pooled_kind(e->kind) && e->size2 != 0) {
        sub_from(s_of().live, e->size2); // allocated before the ring's window
      } else {
        changed = false;
      }
      break;
    }
    case event_type::segment_map:
      if ((e->size2 & gmem::trace::k_segment_stitched) !=
          0) { // arena memory, counted there already
        changed = false;
        break;
      }
      segments[e->address] = {e->size, e->device};
      add_to(s_of().reserved, e->size);
      break;
    case event_type::segment_unmap: {
      if ((e->size2 & gmem::trace::k_segment_stitched) != 0) {
        changed = false;
        break;
      }
      const auto it = segments.find(e->address);
      sub_from(s_of().reserved, it != segments.end() ? it->second.bytes : e->size);
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
    const std::uint64_t bytes = std::max(a.rounded, a.requested);
    if (is_pooled_kind(a.kind)) add_to(present[a.device].live, bytes);
    if (is_graph_kind(a.kind)) add_to(present[a.device].graph, bytes);
  }
  for (const auto& s : trace.segments)
    add_to(present[s.device].reserved, s.bytes);
  for (const auto& [d, p] : present)
    dev[d];
  for (auto& [d, s] : dev) {
    const values now = present[d];
    const std::int64_t shift_live = sat_sub(now.live, s.live),
                       shift_res = sat_sub(now.reserved, s.reserved),
                       shift_graph = sat_sub(now.graph, s.graph);
    device_timeline dt;
    dt.device = d;
    auto clamp = [](std::int64_t v) {
      return static_cast<std::uint64_t>(std::max<std::int64_t>(v, 0));
    };
    dt.points.push_back({t.begin_ns, clamp(shift_live), clamp(shift_res), clamp(shift_graph)});
    for (const auto& [time, v] : s.raw)
      dt.points.push_back({time, clamp(sat_add(v.live, shift_live)),
                           clamp(sat_add(v.reserved, shift_res)),
                           clamp(sat_add(v.graph, shift_graph))});
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
