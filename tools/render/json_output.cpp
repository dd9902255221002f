#include "tools/render/json_output.h"

#include "common/escape.h"

#include "tools/analysis/frag_report.h"
#include "tools/analysis/leak_report.h"

namespace gmem::tools {

using nlohmann::json;

json source_json(const gmem::trace::trace& t) {
  const auto& i = t.info;
  return json{{"pid", i.pid},
              {"command", i.command_line},
              {"argv", i.argv},
              {"state", gmem::trace::to_string(i.state)},
              {"source", i.source},
              {"saved_file", i.saved_file},
              {"format_version", i.format_version},
              {"start_unix_ns", i.start_realtime_ns},
              {"heartbeat_unix_ns", i.heartbeat_realtime_ns},
              {"exit_unix_ns", i.exit_realtime_ns}};
}

json frame_json(const frame_info& f) {
  if (f.python) {
    json j{{"python", true}, {"function", f.function}, {"file", f.file}, {"line", f.line}};
    if (!f.via.empty()) j["via"] = f.via;
    return j;
  }
  json j{{"ip", f.ip}, {"function", f.name()}, {"module", f.module}};
  if (!f.file.empty()) {
    j["file"] = f.file;
    j["line"] = f.line;
  }
  if (f.function.empty()) j["module_offset"] = f.module_offset;
  if (f.stale) j["module_rebuilt"] = true;
  if (!f.note.empty()) j["note"] = f.note;
  return j;
}

namespace {

json site_json(const leak_site& s) {
  json frames = json::array();
  for (const auto& f : s.frames)
    frames.push_back(frame_json(f));
  json j{{"bytes", s.bytes},
         {"rounded_bytes", s.rounded_bytes},
         {"count", s.count},
         {"held_to_exit_count", s.held_count},
         {"oldest_age_ns", s.oldest_age_ns},
         {"youngest_age_ns", s.youngest_age_ns},
         {"devices", s.devices},
         {"kinds", s.kinds},
         {"python_frames", s.python_frames},
         {"folded_frames", s.folded},
         {"python_folded_frames", s.python_folded},
         {"frames", frames}};
  if (s.note != gmem::trace::python_note::none) j["python_note"] = describe(s.note);
  if (!s.suppressed_by.empty()) j["suppressed_by"] = s.suppressed_by;
  if (s.cache != nullptr) j["held_by"] = s.cache->cache;
  j["verdict"] = to_string(s.verdict);
  j["trend"] = json{
      {"growing", s.trend.growing},           {"live_count", s.trend.live_count},
      {"live_bytes", s.trend.live_bytes},     {"slices", s.trend.slices},
      {"early_slices", s.trend.early_slices}, {"rise_count", s.trend.rise_count},
      {"rise_bytes", s.trend.rise_bytes},     {"window_growth_bytes", s.trend.window_growth_bytes},
      {"window_ns", s.trend.window_ns}};
  return j;
}

} // namespace

json leaks_json(const gmem::trace::trace& t, const leak_report& r) {
  json sites = json::array(), suppressed = json::array(), cached = json::array(),
       caches = json::array(), held = json::array();
  for (const auto& s : r.held_sites)
    held.push_back(site_json(s));
  for (const auto& s : r.sites)
    sites.push_back(site_json(s));
  for (const auto& s : r.suppressed)
    suppressed.push_back(site_json(s));
  for (const auto& s : r.cached)
    cached.push_back(site_json(s));
  for (const framework_cache* c : r.caches)
    caches.push_back(json{{"framework", c->framework},
                          {"cache", c->cache},
                          {"holds", c->holds},
                          {"advice", c->advice},
                          {"tensors_observed", r.observed(c)}});
  return json{{"trace", source_json(t)},
              {"process_running", r.process_alive},
              {"incomplete", r.incomplete},
              {"total_bytes", r.total_bytes},
              {"total_count", r.total_count},
              {"held_to_exit_bytes", r.held_bytes},
              {"held_to_exit_count", r.held_count},
              {"all_bytes", r.all_bytes},
              {"all_count", r.all_count},
              {"hidden_sites", r.hidden_sites},
              {"verdicts", r.verdicts == leak_filter::show::leaks  ? "leak"
                           : r.verdicts == leak_filter::show::held ? "held"
                                                                   : "all"},
              {"native_program_ended", r.native_ended},
              {"sites", sites},
              {"apart_bytes", r.held_sites_bytes},
              {"apart_count", r.held_sites_count},
              {"apart", held},
              {"suppressed_bytes", r.suppressed_bytes},
              {"suppressed_count", r.suppressed_count},
              {"suppressed", suppressed},
              {"cached_bytes", r.cached_bytes},
              {"cached_count", r.cached_count},
              {"framework_caches", caches},
              {"tensor_bytes", r.tensor_bytes},
              {"tensor_count", r.tensor_count},
              {"cached", cached}};
}

json frag_json(const gmem::trace::trace& t, const frag_report& r) {
  json devices = json::array();
  for (const auto& d : r.devices) {
    json segs = json::array();
    for (const auto& s : d.segments) {
      json ranges = json::array();
      for (const auto& g : s.ranges)
        ranges.push_back(json{{"offset", g.offset},
                              {"bytes", g.bytes},
                              {"used", g.used},
                              {"requested", g.requested},
                              {"blocks", g.blocks}});
      segs.push_back(json{{"base", s.base},
                          {"bytes", s.bytes},
                          {"used_bytes", s.used_bytes},
                          {"free_bytes", s.free_bytes},
                          {"largest_free", s.largest_free},
                          {"live_blocks", s.live_blocks},
                          {"stitched", s.stitched},
                          {"fragmentation", s.fragmentation()},
                          {"ranges", ranges}});
    }
    json j{{"device", d.device},
           {"reserved_bytes", d.reserved_bytes},
           {"used_bytes", d.used_bytes},
           {"requested_bytes", d.requested_bytes},
           {"free_bytes", d.free_bytes},
           {"largest_free", d.largest_free},
           {"fragmentation", d.fragmentation()},
           {"largest_request", d.largest_request},
           {"graph_bytes", d.graph_bytes},
           {"graph_allocations", d.graph_allocations},
           {"largest_request_after_fence", d.largest_request_after_fence},
           {"empty_segments", d.empty_segments},
           {"empty_bytes", d.empty_bytes},
           {"stitched_ranges", d.stitched_ranges},
           {"stitched_bytes", d.stitched_bytes},
           {"stitches", d.stitches},
           {"kept_ranges", d.kept_ranges},
           {"kept_range_bytes", d.kept_range_bytes},
           {"kept_reuses", d.kept_reuses},
           {"segments", segs},
           {"advice", d.advice}};
    if (d.has_pool_counters)
      j["pool"] = json{{"free_bytes", d.pool_free_bytes},
                       {"largest_free_block", d.pool_largest_free},
                       {"pending_bytes", d.pending_bytes},
                       {"limit_bytes", d.limit_bytes},
                       {"ooms", d.ooms}};
    devices.push_back(std::move(j));
  }
  return json{{"trace", source_json(t)}, {"devices", devices}};
}

json counters_json(const gmem::pool_stats& s) {
  json j = json::object();
#define GMEM_X_JSON(n, d) j[#n] = s.n;
  GMEM_POOL_STATS(GMEM_X_JSON)
#undef GMEM_X_JSON
  j["fragmentation"] = s.fragmentation();
  return j;
}

json stats_json(const gmem::trace::trace& t) {
  json devices = json::array();
  for (const auto& d : t.devices) {
    json c = counters_json(d.stats);
    for (const auto& [name, value] : d.unknown)
      c[name] = value;
    devices.push_back(json{{"device", d.device}, {"time_ns", d.time_ns}, {"counters", c}});
  }
  const auto& l = t.losses;
  return json{{"trace", source_json(t)},
              {"devices", devices},
              {"recorded",
               {{"events", l.last_seq},
                {"events_in_ring", t.events.size()},
                {"lost_events", l.lost_events},
                {"live_allocations", t.live.size()},
                {"live_overflow", l.live_overflow},
                {"unmatched_frees", l.unmatched_frees},
                {"stack_overflow", l.stack_overflow},
                {"segments", t.segments.size()},
                {"stacks", t.stacks.size()},
                {"modules", t.modules.size()}}},
              {"observed",
               {{"allocs", t.observed.allocs},
                {"alloc_ns", t.observed.alloc_ns},
                {"frees", t.observed.frees},
                {"free_ns", t.observed.free_ns},
                {"wall_ns", recorded_wall_ns(t.info)}}}};
}

std::string dump_json(const nlohmann::json& j, int indent) {
  return escape_bidi_in_json(j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace));
}

} // namespace gmem::tools
