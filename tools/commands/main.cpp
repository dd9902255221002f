// gmem: launch programs under libgmem.so, inspect their GPU memory while they run or after
// they are gone, and export the traces. See docs/tools.md.
#include <cstdio>
#include <vector>

#include "tools/commands/commands.h"
#include "tools/commands/exit_codes.h"

#ifndef GMEM_VERSION
#error "GMEM_VERSION must be defined (tools/tools.mk passes the contents of VERSION)"
#endif

namespace {

constexpr const char* k_footer = R"(
Targets: PID (newest trace of that process, running or not), a trace object name from
`gmem ps` (gmem.PID.TICKS.NONCE), or a FILE written by `gmem save` or GMEM_TRACE_SAVE.

Exit status: 0 ok; 1 leaks found (gmem leaks); 2 usage error; 3 no such pid, trace or file;
4 bad trace (corrupt, truncated, other format version); 5 permission denied; 6 I/O error.
`gmem run` exits with the program's status (128+N when killed by signal N; 127 when it could
not be started).)";

} // namespace

int main(int argc, char** argv) {
  using namespace gmem::tools;
  CLI::App app{"gmem: GPU memory pooling, tracing and reports for unmodified CUDA programs",
               "gmem"};
  app.footer(k_footer);
  app.require_subcommand(1);
  app.set_help_all_flag("--help-all", "help for every subcommand");
  app.set_version_flag("--version", "gmem " GMEM_VERSION, "print gmem's version and exit");
  std::vector<std::pair<CLI::App*, command_fn>> commands;
  auto add = [&](command_fn (*f)(CLI::App&)) {
    command_fn fn = f(app);
    commands.emplace_back(app.get_subcommands([](CLI::App*) { return true; }).back(),
                          std::move(fn));
  };
  add(add_run);
  add(add_ps);
  add(add_top);
  add(add_leaks);
  add(add_frag);
  add(add_stats);
  add(add_save);
  add(add_clean);
  add(add_report);
  add(add_export);
  add(add_diff);
  add(add_oom);
  add(add_exporter);
  auto known = [&app](const char* name) {
    try {
      return app.get_subcommand(name) != nullptr;
    } catch (const CLI::OptionNotFound&) {
      return false;
    }
  };
  if (argc > 1 && argv[1][0] != '-' && !known(argv[1])) {
    std::fprintf(stderr, "gmem: error: unknown command '%s' (see: gmem --help)\n", argv[1]);
    return k_exit_usage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string where = "gmem";
    for (const auto* sub : app.get_subcommands())
      where += " " + sub->get_name();
    std::fprintf(stderr, "gmem: error: %s (see: %s --help)\n", e.what(), where.c_str());
    return k_exit_usage;
  }
  for (auto& [sub, fn] : commands)
    if (sub->parsed()) return fn();
  return k_exit_usage;
}
