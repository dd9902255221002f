// `gmem exporter`: checks its options, then runs gmem-exporter (the prometheus-cpp server,
// a separate program so that gmem itself stays a self-contained binary) from gmem's own
// directory with the same options.
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tools/commands/commands.h"
#include "tools/commands/exit_codes.h"
#include "tools/prometheus/exporter_options.h"

namespace gmem::tools {
namespace {

std::string own_directory() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  std::string path(buf, static_cast<std::size_t>(n));
  return path.substr(0, path.rfind('/'));
}

} // namespace

command_fn add_exporter(CLI::App& app) {
  auto* sub = app.add_subcommand("exporter", k_exporter_description);
  auto o = std::make_shared<exporter_options>();
  add_exporter_options(*sub, *o);
  return [o]() -> int {
    if (const std::string err = check(*o); !err.empty()) return fail(k_exit_usage, err);
    const std::string dir = own_directory();
    const std::string program = dir + "/" + k_exporter_program;
    if (dir.empty() || access(program.c_str(), X_OK) != 0)
      return fail(k_exit_not_found,
                  "gmem exporter needs " + program +
                      ", which this build of gmem does not have: it is built when "
                      "prometheus-cpp is installed (apt-get install prometheus-cpp-dev, then "
                      "make)");
    std::vector<std::string> args = {program,
                                     "--listen",
                                     o->listen,
                                     "--top-sites",
                                     std::to_string(o->top_sites),
                                     "--growth-window",
                                     o->growth_window,
                                     "--keep-exited",
                                     o->keep_exited,
                                     "--max-processes",
                                     std::to_string(o->max_processes),
                                     "--scrape-budget",
                                     o->scrape_budget,
                                     "--max-per-user",
                                     std::to_string(o->max_per_user),
                                     "--threads",
                                     std::to_string(o->threads),
                                     "--request-timeout",
                                     o->request_timeout,
                                     "--max-series",
                                     std::to_string(o->max_series),
                                     "--max-bytes",
                                     o->max_bytes};
    if (o->expose_all_users) args.push_back("--expose-all-users");
    if (o->command_line) args.push_back("--command-line");
    std::vector<char*> argv;
    for (auto& a : args)
      argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(program.c_str(), argv.data());
    return fail(k_exit_io, "cannot run " + program + ": " + std::strerror(errno));
  };
}

} // namespace gmem::tools
