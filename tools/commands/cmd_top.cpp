// `gmem top PID`: a live view refreshed in place until the process ends (or --iterations).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <thread>

#include "common/units.h"
#include "tools/analysis/leak_report.h"
#include "tools/commands/commands.h"
#include "tools/commands/exit_codes.h"
#include "tools/commands/trace_source.h"
#include "tools/render/json_output.h"
#include "tools/render/top_view.h"

namespace gmem::tools {

command_fn add_top(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "top", "Live view of a traced process, refreshed in place: per pool live, reserved, peak, "
             "limit, allocation rate, cache hit rate, pending bytes, top call sites.");
  struct args {
    std::string target, interval = "1s";
    bool once = false, json = false, native = false, all_frames = false;
    std::size_t iterations = 0, sites = 10;
  };
  auto a = std::make_shared<args>();
  sub->add_option("target", a->target, "PID (or a trace object or file: shown once)")->required();
  sub->add_flag("--once", a->once, "print one frame and exit (for scripts)");
  sub->add_option("-n,--iterations", a->iterations, "stop after N frames");
  sub->add_option("-d,--interval", a->interval, "time between frames (default 1s)");
  sub->add_option("--sites", a->sites, "call sites shown (default 10)");
  sub->add_flag("--json", a->json, "one JSON object per frame and line (counters and top sites)");
  add_frame_view_flags(*sub, a->native, a->all_frames);
  return [a]() -> int {
    const auto interval = parse_duration_ns(a->interval);
    if (!interval || *interval == 0)
      return fail(k_exit_usage,
                  "--interval '" + a->interval + "' is not a duration (e.g. 1s, 500ms)");
    const bool tty = isatty(STDOUT_FILENO) != 0;
    std::unique_ptr<top_sample> previous;
    for (std::size_t i = 0;; ++i) {
      auto r = open_trace(a->target, {.events = false, .samples = false});
      if (!r.ok) return fail(r.error.code, r.error.message);
      symbolizer symbols(module_ranges(r.value));
      symbols.run_as(symbolizer_uid(r.value));
      std::string frame;
      if (a->json) {
        leak_filter f;
        f.top = a->sites;
        f.view = frame_view_of(a->native, a->all_frames);
        f.verdicts = leak_filter::show::all; // every holder, leak or held, largest first
        f.by_bytes = true;
        f.framework_caches = false; // as the text view: every holder, caches included
        nlohmann::json j = stats_json(r.value);
        j["top_sites"] = leaks_json(r.value, build_leak_report(r.value, symbols, f))["sites"];
        frame = dump_json(j, -1) + "\n";
      } else {
        frame = render_top(r.value, symbols, previous.get(), a->sites,
                           frame_view_of(a->native, a->all_frames));
      }
      if (tty && i > 0 && !a->json)
        std::fputs("\033[H\033[2J", stdout); // home, clear: refresh in place
      std::fputs(frame.c_str(), stdout);
      std::fflush(stdout);
      previous = std::make_unique<top_sample>(take_top_sample(r.value));
      const bool running =
          r.value.info.state == gmem::trace::trace_state::running && !r.value.info.saved_file;
      if (a->once || !running || (a->iterations != 0 && i + 1 >= a->iterations)) {
        if (!running && !a->once)
          std::printf("\n(process %s)\n", gmem::trace::to_string(r.value.info.state));
        return k_exit_ok;
      }
      std::this_thread::sleep_for(std::chrono::nanoseconds(*interval));
    }
  };
}

} // namespace gmem::tools
