// `--json` output of the read commands: the same results as the text printers, as one JSON
// document each (stable key names, sizes in bytes, times in ns), for scripts.
#pragma once

#include <nlohmann/json.hpp>

#include "profiler/trace_model.h"

namespace gmem::tools {

struct leak_report;
struct frag_report;
struct frame_info;

nlohmann::json source_json(const gmem::trace::trace& t);
nlohmann::json frame_json(const frame_info& f);
nlohmann::json leaks_json(const gmem::trace::trace& t, const leak_report& r);
nlohmann::json frag_json(const gmem::trace::trace& t, const frag_report& r);
nlohmann::json stats_json(const gmem::trace::trace& t);
nlohmann::json counters_json(const gmem::pool_stats& s);

} // namespace gmem::tools
