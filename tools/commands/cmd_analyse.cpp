// The analysis commands over one or two traces: diff (two traces per call site) and oom (every
// recorded out-of-memory failure with its snapshot).
#include <cstdio>
#include <memory>

#include "tools/analysis/oom_report.h"
#include "tools/analysis/trace_diff.h"
#include "tools/analysis/trace_facts.h"
#include "tools/commands/commands.h"
#include "tools/commands/exit_codes.h"
#include "tools/render/analysis_printers.h"

namespace gmem::tools {

command_fn add_diff(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "diff", "Compare the outstanding allocations of two traces per call site: bytes and counts "
              "added, freed and net from A to B (two gmem save snapshots of one process, or the "
              "traces of two runs). Exits 1 when B holds more than A.");
  struct args {
    std::string a, b;
    std::size_t frames = 4, top = 0;
    bool json = false, full_paths = false;
  };
  auto a = std::make_shared<args>();
  sub->add_option("A", a->a, "the earlier trace: PID, trace object or saved FILE")->required();
  sub->add_option("B", a->b, "the later trace: PID, trace object or saved FILE")->required();
  sub->add_option("--top", a->top, "at most N call sites (default: all)");
  sub->add_option("--frames", a->frames, "stack frames per call site (default 4)");
  sub->add_flag("--full-paths", a->full_paths, "show full source paths");
  sub->add_flag("--json", a->json, "one JSON document instead of text");
  return [a]() -> int {
    int status = 0;
    const gmem::trace::read_options opts{.events = false, .samples = false};
    auto ta = load(a->a, status, opts);
    if (!ta) return status;
    auto tb = load(a->b, status, opts);
    if (!tb) return status;
    symbolizer sa(module_ranges(*ta)), sb(module_ranges(*tb));
    sa.run_as(symbolizer_uid(*ta));
    sb.run_as(symbolizer_uid(*tb));
    site_resolver ra(sa), rb(sb);
    trace_diff d = build_trace_diff(*ta, ra, *tb, rb);
    if (a->top != 0 && d.sites.size() > a->top) d.sites.resize(a->top); // totals stay whole
    print_options o;
    o.frames = a->frames;
    o.full_paths = a->full_paths;
    if (!write_output("-", a->json ? dump(diff_json(*ta, *tb, d)) : print_diff(*ta, *tb, d, o)))
      return k_exit_io;
    return d.total.net_bytes() > 0 ? k_exit_leaks : k_exit_ok;
  };
}

command_fn add_oom(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "oom", "Every out-of-memory failure the trace recorded: the request, the pool's state at "
             "the failure (reserved, live, cached, pending, fragmentation, largest free block, "
             "limit) and the call sites holding the most memory then. Exits 1 when there was "
             "one.");
  struct args {
    std::string target;
    std::size_t top = 5;
    bool json = false;
  };
  auto a = std::make_shared<args>();
  sub->add_option("target", a->target, k_target_help)->required();
  sub->add_option("--top", a->top, "holders shown per failure (default 5)");
  sub->add_flag("--json", a->json, "one JSON document instead of text");
  return [a]() -> int {
    int status = 0;
    auto t = load(a->target, status, {.events = true, .samples = true});
    if (!t) return status;
    symbolizer symbols(module_ranges(*t));
    symbols.run_as(symbolizer_uid(*t));
    site_resolver sites(symbols);
    const oom_report r = build_oom_report(*t, sites, a->top);
    if (!write_output("-", a->json ? dump(ooms_json(*t, r, sites))
                                   : print_ooms(*t, r, sites, print_options{})))
      return k_exit_io;
    return r.ooms.empty() && r.counted_ooms == 0 ? k_exit_ok : k_exit_leaks;
  };
}

} // namespace gmem::tools
