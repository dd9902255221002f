// Text and JSON output of `gmem leaks --growth`, `gmem diff` and `gmem oom`: pure functions from
// results to strings / JSON, pinned by golden files.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "profiler/format/trace_model.h"
#include "tools/analysis/call_sites.h"
#include "tools/render/printers.h"

namespace gmem::tools {

struct growth_report;
struct trace_diff;
struct oom_report;

std::string print_growth(const gmem::trace::trace& t, const growth_report& r,
                         const site_resolver& sites, const print_options& o);
nlohmann::json growth_json(const gmem::trace::trace& t, const growth_report& r,
                           const site_resolver& sites);

std::string print_diff(const gmem::trace::trace& a, const gmem::trace::trace& b,
                       const trace_diff& d, const print_options& o);
nlohmann::json diff_json(const gmem::trace::trace& a, const gmem::trace::trace& b,
                         const trace_diff& d);

std::string print_ooms(const gmem::trace::trace& t, const oom_report& r, const site_resolver& sites,
                       const print_options& o);
nlohmann::json ooms_json(const gmem::trace::trace& t, const oom_report& r,
                         const site_resolver& sites);

// "+1.5 MiB", "-512 B", "0 B".
std::string format_signed_bytes(std::int64_t bytes);

} // namespace gmem::tools
