#include "tools/export/chrome_export.h"

#include <map>

#include "tools/stack_view.h"

#include "common/units.h"
#include "tools/analysis/leak_report.h"
#include "tools/analysis/timeline.h"
#include "tools/render/json_output.h"

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
        json& node = table_[it->second];
        node["name"] = name;
        node["category"] = f->python ? "python" : "native";
        if (!parent.empty()) node["parent"] = parent;
      }
      parent = it->second;
    }
    return leaf_.emplace(stack_id, parent).first->second;
  }
  // Hands the table over: called once, after the last leaf().
  json take_table() { return std::move(table_); }

private:
  const gmem::trace::trace& t_;
  symbolizer& symbols_;
  frame_view view_;
  std::map<std::uint32_t, std::string> leaf_;
  std::map<std::string, std::string> nodes_;
  json table_ = json::object();
};

// One event, built field by field. An initializer list would first build each field as a
// two-element array and then move it into the object: several allocations per field, which
// made building the events the export's main cost.
json event(const char* ph, int pid, int tid, std::string name, double ts) {
  json e = json::object();
  e["ph"] = ph;
  e["pid"] = pid;
  e["tid"] = tid;
  e["name"] = std::move(name);
  e["ts"] = ts;
  return e;
}

// An instant event of category `cat` with its scope ("t" thread, "p" process).
json instant(int pid, int tid, std::string name, double ts, const char* scope, const char* cat) {
  json e = event("i", pid, tid, std::move(name), ts);
  e["s"] = scope;
  e["cat"] = cat;
  return e;
}

} // namespace

json chrome_trace(const gmem::trace::trace& t, symbolizer& symbols, bool all_frames) {
  const frame_view view = all_frames ? frame_view::all : frame_view::mixed;
  const int pid = static_cast<int>(t.info.pid);
  json ev = json::array();
  {
    json m = json::object();
    m["ph"] = "M";
    m["pid"] = pid;
    m["tid"] = 0;
    m["name"] = "process_name";
    m["args"]["name"] = "gmem: " + t.info.command_line;
    ev.push_back(std::move(m));
  }
  const timeline tl = build_timeline(t);
  for (const auto& d : tl.devices) {
    const std::string name = pool_name(d.device) + " memory";
    for (const auto& p : d.points) {
      json c = event("C", pid, 0, name, us(p.t_ns));
      json& args = c["args"];
      args["live"] = p.live;
      args["reserved"] = p.reserved;
      args["graph"] = p.graph;
      ev.push_back(std::move(c));
    }
  }
  for (const auto& s : t.samples) {
    json c = event("C", pid, 0, pool_name(s.device) + " pool", us(s.time_ns));
    json& args = c["args"];
    args["pending"] = s.stats.pending_bytes;
    args["free"] = s.stats.free_bytes;
    args["largest_free_block"] = s.stats.largest_free_block;
    ev.push_back(std::move(c));
  }
  stack_frames sf(t, symbols, view);
  for (const auto& e : t.events) {
    using gmem::trace::event_type;
    const int tid = static_cast<int>(e.thread);
    switch (e.type) {
    case event_type::alloc: {
      json a = instant(pid, tid, "alloc " + format_bytes(e.size), us(e.time_ns), "t", "alloc");
      json& args = a["args"];
      args["bytes"] = e.size;
      args["address"] = e.address;
      args["device"] = e.device;
      if (std::string leaf = sf.leaf(e.stack_id); !leaf.empty()) a["sf"] = std::move(leaf);
      ev.push_back(std::move(a));
      break;
    }
    case event_type::marker: {
      ev.push_back(instant(pid, tid, e.label, us(e.time_ns), "p", "marker"));
      break;
    }
    case event_type::oom: {
      json o = instant(pid, tid, "OOM " + format_bytes(e.size), us(e.time_ns), "p", "oom");
      json& args = o["args"];
      args["requested"] = e.size;
      args["device"] = e.device;
      if (e.stack_id != 0) {
        json& frames = args["stack"] = json::array();
        for (const auto& f : show_stack(t, e.stack_id, symbols, view).frames)
          frames.push_back(f.file.empty() ? f.name() : f.name() + " (" + f.location() + ")");
      }
      ev.push_back(std::move(o));
      break;
    }
    case event_type::fence: {
      json x = event("X", pid, tid, "fence", us(e.time_ns));
      x["cat"] = "fence";
      x["dur"] = us(e.size2);
      json& args = x["args"];
      args["released"] = e.size;
      args["device"] = e.device;
      ev.push_back(std::move(x));
      break;
    }
    case event_type::trim: {
      ev.push_back(instant(pid, tid, "trim " + format_bytes(e.size), us(e.time_ns), "t", "trim"));
      break;
    }
    default:
      break;
    }
  }
  // Moved, not copied: an initializer list would copy every event a second time.
  json out = json::object();
  out["traceEvents"] = std::move(ev);
  out["stackFrames"] = sf.take_table();
  out["displayTimeUnit"] = "ms";
  out["otherData"] = json{{"generator", "gmem export"},
                          {"trace", source_json(t)},
                          {"lost_events", t.losses.lost_events}};
  return out;
}

} // namespace gmem::tools
