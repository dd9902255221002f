// `--json` output of the read commands: the same results as the text printers, as one JSON
// document each (stable key names, sizes in bytes, times in ns), for scripts.
#pragma once

#include <nlohmann/json.hpp>

#include "profiler/format/trace_model.h"

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

// The document as text: invalid UTF-8 from a trace becomes U+FFFD (no exception), JSON escapes
// control characters itself, and bidirectional controls are written as "\u202e" escapes
// (escape_bidi_in_json()). `indent` as nlohmann's dump(): -1 one line.
std::string dump_json(const nlohmann::json& j, int indent);

} // namespace gmem::tools
