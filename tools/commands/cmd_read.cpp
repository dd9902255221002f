// The read commands: leaks, frag, stats, report, export. Each opens one trace (pid, object or
// file), runs an analysis and prints text, JSON, HTML, or an export.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>

#include "common/escape.h"
#include "common/safe_file.h"
#include "common/units.h"
#include "tools/analysis/frag_report.h"
#include "tools/analysis/growth_report.h"
#include "tools/analysis/leak_report.h"
#include "tools/analysis/trace_facts.h"
#include "tools/commands/commands.h"
#include "tools/commands/trace_source.h"
#include "tools/export/chrome_export.h"
#include "tools/export/pytorch_export.h"
#include "tools/render/analysis_printers.h"
#include "tools/render/flame_graph.h"
#include "tools/render/html_report.h"
#include "tools/render/json_output.h"
#include "tools/render/printers.h"

namespace gmem::tools {

int fail(int code, const std::string& message) {
  std::fprintf(stderr, "gmem: error: %s\n", escape_text(message).c_str());
  return code;
}

bool write_output(const std::string& path, const std::string& data, bool replace) {
  if (path == "-") {
    std::fwrite(data.data(), 1, data.size(), stdout);
    return std::fflush(stdout) == 0;
  }
  std::string error;
  if (!write_file_safely(path, data, replace, &error)) {
    fail(k_exit_io, "cannot write " + error);
    return false;
  }
  return true;
}

void add_frame_view_flags(CLI::App& sub, bool& native, bool& all_frames) {
  auto* n =
      sub.add_flag("--native", native, "native frames only (folded), not the Python frames first");
  sub.add_flag("--all-frames", all_frames,
               "every frame: Python, then native with runtime and interpreter internals")
      ->excludes(n);
}

frame_view frame_view_of(bool native, bool all_frames) {
  return all_frames ? frame_view::all : native ? frame_view::native : frame_view::python_first;
}

namespace {

int leak_growth(const std::string& target, const std::string& window, std::size_t top,
                std::size_t frames, bool full_paths, bool as_json) {
  const auto ns = parse_duration_ns(window);
  if (!ns || *ns == 0)
    return fail(k_exit_usage,
                "--growth '" + window + "' is not a positive duration (e.g. 10m, 1h)");
  int status = 0;
  auto t = load(target, status, {.events = true, .samples = false});
  if (!t) return status;
  symbolizer symbols(module_ranges(*t));
  symbols.run_as(symbolizer_uid(*t));
  site_resolver sites(symbols);
  const growth_report r = build_growth_report(*t, sites, *ns, top);
  print_options o;
  o.frames = frames;
  o.full_paths = full_paths;
  if (!write_output("-", as_json ? dump(growth_json(*t, r, sites)) : print_growth(*t, r, sites, o)))
    return k_exit_io;
  const bool grew = !r.sites.empty() && r.sites.front().growth_bytes > 0;
  return grew ? k_exit_leaks : k_exit_ok;
}

} // namespace

std::unique_ptr<gmem::trace::trace> load(const std::string& target, int& status,
                                         const gmem::trace::read_options& opts) {
  auto r = open_trace(target, opts);
  if (!r.ok) {
    status = fail(r.error.code, r.error.message);
    return nullptr;
  }
  std::fputs((r.note + trace_warnings(r.value)).c_str(), stderr);
  return std::make_unique<gmem::trace::trace>(std::move(r.value));
}

std::string dump(const nlohmann::json& j) {
  return dump_json(j, 2) + "\n";
}

command_fn add_leaks(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "leaks", "Outstanding allocations grouped by call site, each with its verdict: leak (its "
               "memory grows as the program repeats; growing sites first, with their rate) or "
               "held (allocated a bounded number of times and kept), listed apart. Exits 1 when "
               "a leak is reported, so CI can fail on leaks.");
  struct args {
    std::string target, min_age, max_age, min_bytes, since_marker, growth, verdict;
    std::size_t top = 0, frames = 8;
    bool json = false, full_paths = false, native = false, all_frames = false,
         no_default_suppressions = false, no_framework_caches = false, at_peak = false, all = false;
    std::vector<std::string> suppressions;
  };
  auto a = std::make_shared<args>();
  sub->add_option("target", a->target, k_target_help);
  auto* growth =
      sub->add_option("--growth", a->growth,
                      "rank call sites by how much their outstanding bytes grew over the last "
                      "WINDOW (default 10m) instead of by size; exits 1 when a site grew")
          ->expected(0, 1)
          ->type_name("WINDOW");
  add_frame_view_flags(*sub, a->native, a->all_frames);
  sub->add_option("--since-marker", a->since_marker,
                  "only allocations made after the last marker with this label (gmem.mark(), "
                  "gmem_mark(); found in the event ring)");
  sub->add_flag("--at-peak", a->at_peak,
                "the allocations live when the most bytes were live (replayed from the event "
                "ring; with --since-marker, the peak after the marker) instead of those live now");
  sub->add_option("--suppressions", a->suppressions,
                  "file of leak:PATTERN lines (docs/tools.md); sites matching are listed apart "
                  "and not counted by the exit status (repeatable)");
  sub->add_flag("--no-default-suppressions", a->no_default_suppressions,
                "do not apply the built-in list (cuBLAS, cuBLASLt, cuDNN, cuFFT, cuSOLVER, "
                "cuSPARSE, NCCL handles and workspaces, PyTorch's pinned host cache, "
                "frameworks' CUDA graph memory)");
  sub->add_flag("--no-framework-caches", a->no_framework_caches,
                "count what frameworks' caching allocators hold (PyTorch, CuPy, XLA) as leaks "
                "instead of listing it apart");
  sub->add_flag("--all", a->all,
                "every outstanding allocation is a leak, whatever its verdict (held sites "
                "counted too, as compute-sanitizer counts them); same as --verdict all");
  sub->add_option("--verdict", a->verdict,
                  "which sites to list: leak (default; held sites in one line each after "
                  "them), held (the held sites; the leaks after them), all (every site, as --all)")
      ->type_name("leak|held|all");
  sub->add_option("--min-age", a->min_age, "only allocations at least this old (30s, 5m, 250ms)");
  sub->add_option("--max-age", a->max_age,
                  "only allocations at most this old (made in the last 30s, 5m, 250ms)");
  sub->add_option("--min-bytes", a->min_bytes,
                  "only call sites holding at least this much (1M, 4K)");
  sub->add_option("--top", a->top, "at most N call sites (default: all)");
  sub->add_option("--frames", a->frames, "stack frames per call site (default 8)");
  sub->add_flag("--full-paths", a->full_paths, "show full source and module paths");
  sub->add_flag("--json", a->json, "one JSON document instead of text");
  return [a, growth]() -> int {
    if (growth->count() > 0 && a->target.empty()) std::swap(a->target, a->growth); // --growth PID
    if (a->target.empty())
      return fail(k_exit_usage, "gmem leaks needs a target: " + std::string(k_target_help));
    if (growth->count() > 0)
      return leak_growth(a->target, a->growth.empty() ? "10m" : a->growth, a->top, a->frames,
                         a->full_paths, a->json);
    leak_filter f;
    f.top = a->top;
    if (a->verdict == "held")
      f.verdicts = leak_filter::show::held;
    else if (a->verdict == "all" || a->all)
      f.verdicts = leak_filter::show::all;
    else if (!a->verdict.empty() && a->verdict != "leak")
      return fail(k_exit_usage, "--verdict '" + a->verdict + "' is not leak, held or all");
    if (a->all && !a->verdict.empty() && a->verdict != "all")
      return fail(k_exit_usage, "--all and --verdict " + a->verdict + " contradict each other");
    if (!a->min_age.empty()) {
      auto ns = parse_duration_ns(a->min_age);
      if (!ns)
        return fail(k_exit_usage,
                    "--min-age '" + a->min_age + "' is not a duration (e.g. 30s, 5m)");
      f.min_age_ns = *ns;
    }
    if (!a->max_age.empty()) {
      auto ns = parse_duration_ns(a->max_age);
      if (!ns || *ns == 0)
        return fail(k_exit_usage,
                    "--max-age '" + a->max_age + "' is not a positive duration (e.g. 30s, 5m)");
      f.max_age_ns = *ns;
    }
    if (!a->min_bytes.empty()) {
      auto b = parse_size(a->min_bytes);
      if (!b)
        return fail(k_exit_usage, "--min-bytes '" + a->min_bytes + "' is not a size (e.g. 1M)");
      f.min_bytes = *b;
    }
    f.view = frame_view_of(a->native, a->all_frames);
    suppression_list supp;
    if (!a->no_default_suppressions) supp = suppression_list::defaults();
    for (const auto& path : a->suppressions) {
      std::string error;
      auto more = suppression_list::load(path, &error);
      if (!more) return fail(k_exit_usage, error);
      supp.append(*more);
    }
    f.suppressions = &supp;
    f.framework_caches = !a->no_framework_caches;
    int status = 0;
    // The events decide the verdicts (leak_verdict.h).
    auto t = load(a->target, status, {.events = true, .samples = false});
    if (!t) return status;
    if (!a->since_marker.empty()) {
      bool found = false;
      for (const auto& e : t->events)
        if (e.type == gmem::trace::event_type::marker && e.label == a->since_marker)
          found = true, f.min_time_ns = e.time_ns;
      if (!found)
        return fail(k_exit_not_found, "no marker '" + a->since_marker +
                                          "' in the trace's event ring (never set, or lapped)");
    }
    if (a->at_peak) {
      f.verdicts = leak_filter::show::all; // what was live at the peak, not a verdict on leaks
      bool complete = true;
      std::uint64_t peak_ns = 0;
      t->live = live_at_peak(*t, f.min_time_ns, &complete, &peak_ns);
      std::fprintf(stderr, "gmem: allocations live at the peak, %s after start%s\n",
                   format_duration_ns(peak_ns).c_str(),
                   complete ? "" : " (the event ring lost its oldest events: some are missing)");
    }
    symbolizer symbols(module_ranges(*t));
    symbols.run_as(symbolizer_uid(*t));
    const leak_report r = build_leak_report(*t, symbols, f);
    print_options o;
    o.frames = a->frames;
    o.full_paths = a->full_paths;
    if (!write_output("-", a->json ? dump(leaks_json(*t, r)) : print_leaks(*t, r, o)))
      return k_exit_io;
    const bool leaks =
        f.verdicts == leak_filter::show::held ? !r.held_sites.empty() : !r.sites.empty();
    return leaks ? k_exit_leaks : k_exit_ok;
  };
}

command_fn add_frag(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "frag", "Fragmentation per device and per segment: a map of used and free space, the "
              "largest block, the largest request that fits without growing, and advice.");
  struct args {
    std::string target;
    std::size_t width = 64;
    bool json = false;
  };
  auto a = std::make_shared<args>();
  sub->add_option("target", a->target, k_target_help)->required();
  sub->add_option("--width", a->width, "characters per segment map (default 64)");
  sub->add_flag("--json", a->json, "one JSON document instead of text");
  return [a]() -> int {
    int status = 0;
    auto t = load(a->target, status, {.events = false, .samples = false});
    if (!t) return status;
    const frag_report r = build_frag_report(*t);
    print_options o;
    o.map_width = std::max<std::size_t>(8, a->width);
    return write_output("-", a->json ? dump(frag_json(*t, r)) : print_frag(*t, r, o)) ? k_exit_ok
                                                                                      : k_exit_io;
  };
}

command_fn add_stats(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "stats", "Every pool counter of every device, and what the trace recorded.");
  struct args {
    std::string target;
    bool json = false;
  };
  auto a = std::make_shared<args>();
  sub->add_option("target", a->target, k_target_help)->required();
  sub->add_flag("--json", a->json, "one JSON document instead of text");
  return [a]() -> int {
    int status = 0;
    auto t = load(a->target, status, {.events = true, .samples = false});
    if (!t) return status;
    return write_output("-", a->json ? dump(stats_json(*t)) : print_stats(*t)) ? k_exit_ok
                                                                               : k_exit_io;
  };
}

command_fn add_report(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "report", "One self-contained HTML file: timeline of live vs reserved memory with markers, "
                "OOMs and fences, the segment map, leak and fragmentation tables.");
  struct args {
    std::string target, out = "gmem-report.html";
    bool force = false, native = false, all_frames = false;
  };
  auto a = std::make_shared<args>();
  sub->add_option("target", a->target, k_target_help)->required();
  add_frame_view_flags(*sub, a->native, a->all_frames);
  sub->add_option("-o,--output", a->out,
                  "HTML file to write (default gmem-report.html; - = stdout)");
  sub->add_flag("--force", a->force, "replace the file if it exists");
  return [a]() -> int {
    int status = 0;
    auto t = load(a->target, status);
    if (!t) return status;
    symbolizer symbols(module_ranges(*t));
    symbols.run_as(symbolizer_uid(*t));
    if (!write_output(a->out, html_report(*t, symbols, frame_view_of(a->native, a->all_frames)),
                      a->force))
      return k_exit_io;
    if (a->out != "-") std::fprintf(stderr, "gmem: wrote %s\n", a->out.c_str());
    return k_exit_ok;
  };
}

command_fn add_export(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "export", "Export a trace: --format chrome (Chrome trace JSON for Perfetto / "
                "chrome://tracing) or --format pytorch (snapshot pickle for PyTorch's memory "
                "viewer, pytorch.org/memory_viz).");
  struct args {
    std::string target, format = "chrome", out = "-";
    bool force = false, all_frames = false;
  };
  auto a = std::make_shared<args>();
  sub->add_option("target", a->target, k_target_help)->required();
  sub->add_option("-f,--format", a->format, "chrome or pytorch")
      ->check(CLI::IsMember({"chrome", "pytorch"}));
  sub->add_flag("--all-frames", a->all_frames,
                "every frame: Python (frameworks' own code included), then native with runtime "
                "and interpreter internals");
  sub->add_option("-o,--output", a->out, "file to write (default: stdout)");
  sub->add_flag("--force", a->force, "replace the file if it exists");
  return [a]() -> int {
    int status = 0;
    auto t = load(a->target, status);
    if (!t) return status;
    symbolizer symbols(module_ranges(*t));
    symbols.run_as(symbolizer_uid(*t));
    const std::string data =
        a->format == "chrome"
            ? chrome_trace(*t, symbols, a->all_frames)
                      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                  "\n"
            : encode_pickle(pytorch_snapshot(*t, symbols, a->all_frames));
    if (!write_output(a->out, data, a->force)) return k_exit_io;
    if (a->out != "-")
      std::fprintf(stderr, "gmem: wrote %s (%s)\n", a->out.c_str(), a->format.c_str());
    return k_exit_ok;
  };
}

} // namespace gmem::tools
