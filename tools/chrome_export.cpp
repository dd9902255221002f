#include "tools/chrome_export.h"

#include <map>

#include "tools/stack_view.h"

#include "common/units.h"
#include "tools/json_output.h"
#include "tools/leak_report.h"
#include "tools/timeline.h"

namespace gmem::tools {
namespace {

using nlohmann::json;

double us(std::uint64_t ns) {
  return static_cast<double>(ns) / 1000.0;
}

std::string pool_name(int device) {
  return device < 0 ? std::string("host pool") : "device " + std::to_string(device);
}

// The trace format's "stackFrames" table: one node per (parent, frame), so allocations from one
// call site share their frames; events name their innermost node with "sf". Python frames
// (mixed view) come first, like PyTorch's own snapshots.
class stack_frames {
public:
  stack_frames(const gmem::trace::trace& t, symbolizer& s, frame_view view)
      : t_(t), symbols_(s), view_(view) {}
  // The node id of a stack's innermost frame, "" when it has none.
  std::string leaf(std::uint32_t stack_id) {
    if (stack_id == 0) return {};
    if (auto it = leaf_.find(stack_id); it != leaf_.end()) return it->second;
    const auto frames = show_stack(t_, stack_id, symbols_, view_).frames;
    std::string parent;
    for (auto f = frames.rbegin(); f != frames.rend(); ++f) { // outermost first
      const std::string name = f->file.empty() ? f->name() : f->name() + " (" + f->location() + ")";
      const std::string key = parent + '\x1f' + name;
      auto [it, fresh] = nodes_.try_emplace(key, std::to_string(nodes_.size() + 1));
      if (fresh) {
        json node{{"name", name}, {"category", f->python ? "python" : "native"}};
        if (!parent.empty()) node["parent"] = parent;
        table_[it->second] = node;
      }
      parent = it->second;
    }
    return leaf_.emplace(stack_id, parent).first->second;
  }
  json table() const { return table_; }

private:
  const gmem::trace::trace& t_;
  symbolizer& symbols_;
  frame_view view_;
  std::map<std::uint32_t, std::string> leaf_;
  std::map<std::string, std::string> nodes_;
  json table_ = json::object();
};

} // namespace

json chrome_trace(const gmem::trace::trace& t, symbolizer& symbols, bool all_frames) {
  const frame_view view = all_frames ? frame_view::all : frame_view::mixed;
  const int pid = static_cast<int>(t.info.pid);
  json ev = json::array();
  ev.push_back(json{{"ph", "M"},
                    {"pid", pid},
                    {"tid", 0},
                    {"name", "process_name"},
                    {"args", {{"name", "gmem: " + t.info.command_line}}}});
  const timeline tl = build_timeline(t);
  for (const auto& d : tl.devices) {
    const std::string name = pool_name(d.device) + " memory";
    for (const auto& p : d.points)
      ev.push_back(
          json{{"ph", "C"},
               {"pid", pid},
               {"tid", 0},
               {"name", name},
               {"ts", us(p.t_ns)},
               {"args", {{"live", p.live}, {"reserved", p.reserved}, {"graph", p.graph}}}});
  }
  for (const auto& s : t.samples)
    ev.push_back(json{{"ph", "C"},
                      {"pid", pid},
                      {"tid", 0},
                      {"name", pool_name(s.device) + " pool"},
                      {"ts", us(s.time_ns)},
                      {"args",
                       {{"pending", s.stats.pending_bytes},
                        {"free", s.stats.free_bytes},
                        {"largest_free_block", s.stats.largest_free_block}}}});
  stack_frames sf(t, symbols, view);
  for (const auto& e : t.events) {
    using gmem::trace::event_type;
    const int tid = static_cast<int>(e.thread);
    switch (e.type) {
    case event_type::alloc: {
      json a{{"ph", "i"},
             {"s", "t"},
             {"pid", pid},
             {"tid", tid},
             {"name", "alloc " + format_bytes(e.size)},
             {"cat", "alloc"},
             {"ts", us(e.time_ns)},
             {"args", {{"bytes", e.size}, {"address", e.address}, {"device", e.device}}}};
      if (const std::string leaf = sf.leaf(e.stack_id); !leaf.empty()) a["sf"] = leaf;
      ev.push_back(std::move(a));
      break;
    }
    case event_type::marker:
      ev.push_back(json{{"ph", "i"},
                        {"s", "p"},
                        {"pid", pid},
                        {"tid", tid},
                        {"name", e.label},
                        {"cat", "marker"},
                        {"ts", us(e.time_ns)}});
      break;
    case event_type::oom: {
      json args{{"requested", e.size}, {"device", e.device}};
      if (e.stack_id != 0) {
        json frames = json::array();
        for (const auto& f : show_stack(t, e.stack_id, symbols, view).frames)
          frames.push_back(f.file.empty() ? f.name() : f.name() + " (" + f.location() + ")");
        args["stack"] = frames;
      }
      ev.push_back(json{{"ph", "i"},
                        {"s", "p"},
                        {"pid", pid},
                        {"tid", tid},
                        {"name", "OOM " + format_bytes(e.size)},
                        {"cat", "oom"},
                        {"ts", us(e.time_ns)},
                        {"args", args}});
      break;
    }
    case event_type::fence:
      ev.push_back(json{{"ph", "X"},
                        {"pid", pid},
                        {"tid", tid},
                        {"name", "fence"},
                        {"cat", "fence"},
                        {"ts", us(e.time_ns)},
                        {"dur", us(e.size2)},
                        {"args", {{"released", e.size}, {"device", e.device}}}});
      break;
    case event_type::trim:
      ev.push_back(json{{"ph", "i"},
                        {"s", "t"},
                        {"pid", pid},
                        {"tid", tid},
                        {"name", "trim " + format_bytes(e.size)},
                        {"cat", "trim"},
                        {"ts", us(e.time_ns)}});
      break;
    default:
      break;
    }
  }
  return json{{"traceEvents", ev},
              {"stackFrames", sf.table()},
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"generator", "gmem export"},
                {"trace", source_json(t)},
                {"lost_events", t.losses.lost_events}}}};
}

} // namespace gmem::tools
