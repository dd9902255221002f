#include "tools/chrome_export.h"

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

} // namespace

json chrome_trace(const gmem::trace::trace& t, symbolizer& symbols) {
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
  for (const auto& e : t.events) {
    using gmem::trace::event_type;
    const int tid = static_cast<int>(e.thread);
    switch (e.type) {
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
        for (const auto& f : show_stack(t, e.stack_id, symbols, frame_view::mixed).frames)
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
              {"displayTimeUnit", "ms"},
              {"otherData",
               {{"generator", "gmem export"},
                {"trace", source_json(t)},
                {"lost_events", t.losses.lost_events}}}};
}

} // namespace gmem::tools
