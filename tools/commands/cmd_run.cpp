// `gmem run [options] -- CMD ARGS...`: runs CMD with libgmem.so preloaded, passes its exit
// status through and prints a one-screen summary from its trace when it ends.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "common/escape.h"
#include "common/options.h"
#include "common/units.h"
#include "profiler/reader/process_identity.h"
#include "tools/commands/commands.h"
#include "tools/commands/exit_codes.h"
#include "tools/commands/run_env.h"
#include "tools/commands/run_summary.h"
#include "tools/commands/trace_source.h"

extern char** environ;

namespace gmem::tools {
namespace {

pid_t g_child = 0;

void forward_signal(int sig) {
  if (g_child > 0) kill(g_child, sig);
}

std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("gmem");
}

} // namespace

command_fn add_run(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "run", "Run a program with libgmem.so preloaded: its device and pinned-host allocations are "
             "pooled and traced. Exits with the program's status and prints a summary at exit.");
  struct args {
    std::vector<std::string> command, env;
    std::vector<std::pair<std::string, std::string>> settings;
    std::vector<std::pair<const char*, std::shared_ptr<std::string>>> flag_values;
    bool quiet = false;
    bool strict = false;
  };
  auto a = std::make_shared<args>();
  std::size_t n_rows = 0;
  const option_row* rows = option_rows(&n_rows);
  for (std::size_t i = 0; i < n_rows; ++i) {
    if (std::string_view(rows[i].field) == "strict") { // a switch: `gmem run --strict -- CMD`
      sub->add_flag("--strict", a->strict,
                    std::string(rows[i].help) + " [sets " + rows[i].env_name + "=1; default: off]")
          ->group("Pool and trace options");
      continue;
    }
    auto value = std::make_shared<std::string>();
    const std::string def =
        rows[i].default_text[0] != '\0' ? rows[i].default_text : rows[i].empty_means;
    sub->add_option(flag_name_of(rows[i].field), *value,
                    std::string(rows[i].help) + " [sets " + rows[i].env_name + "; default: " + def +
                        "]")
        ->group("Pool and trace options");
    a->flag_values.emplace_back(rows[i].env_name, value);
  }
  sub->add_option("-e,--env", a->env,
                  "set GMEM_NAME=VALUE in the program's environment (repeatable)");
  sub->add_flag("-q,--quiet", a->quiet, "no summary at exit");
  sub->add_option("command", a->command, "the program and its arguments (after --)")->required();
  sub->positionals_at_end();
  return [a]() -> int {
    for (const auto& [env_name, value] : a->flag_values)
      if (!value->empty()) a->settings.emplace_back(env_name, *value);
    if (a->strict) a->settings.emplace_back("GMEM_STRICT", "1");
    for (const auto& e : a->env) {
      const auto eq = e.find('=');
      if (eq == std::string::npos || e.rfind("GMEM_", 0) != 0)
        return fail(k_exit_usage, "--env '" + e + "': expected GMEM_NAME=VALUE");
      a->settings.emplace_back(e.substr(0, eq), e.substr(eq + 1));
    }
    for (const auto& [name, value] : a->settings) {
      const std::string warning = check_option_value(name.c_str(), value);
      if (!warning.empty()) {
        std::string what = warning.substr(std::min(warning.find(name), warning.size()));
        what = what.substr(0, what.find("; ")); // the shim would go on with a default; we stop
        return fail(k_exit_usage, what + " (see gmem run --help)");
      }
    }
    std::string why;
    const std::string lib = find_libgmem(self_exe(), std::getenv("GMEM_LIB"), &why, geteuid());
    if (lib.empty()) return fail(k_exit_cannot_run, escape_text(why));
    if (const std::string problem = preload_problem(lib); !problem.empty())
      return fail(k_exit_cannot_run, "cannot preload " + escape_text(problem));
    std::vector<std::string> env;
    for (char** e = environ; *e != nullptr; ++e)
      env.emplace_back(*e);
    // GMEM_FRAMEWORKS from the environment is checked by the shim, which warns and observes.
    const gmem::framework_env_plan frameworks = framework_plan(env, a->settings);
    for (const auto& setting : frameworks.set)
      a->settings.push_back(setting);
    if (!frameworks.message.empty() && !a->quiet)
      std::fprintf(stderr, "%s\n", frameworks.message.c_str());
    env = child_environment(env, a->settings, lib);
    std::vector<char*> envp, argv;
    for (auto& e : env)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    for (auto& c : a->command)
      argv.push_back(c.data());
    argv.push_back(nullptr);

    int ready[2]; // close-on-exec pipe: the child writes errno only if exec fails
    if (pipe2(ready, O_CLOEXEC) != 0)
      return fail(k_exit_io, std::string("pipe: ") + std::strerror(errno));
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child < 0) return fail(k_exit_cannot_run, std::string("fork: ") + std::strerror(errno));
    if (child == 0) {
      close(ready[0]);
      execvpe(argv[0], argv.data(), envp.data());
      const int err = errno;
      (void)!write(ready[1], &err, sizeof err);
      _exit(k_exit_cannot_run);
    }
    close(ready[1]);
    g_child = child;
    signal(SIGINT, SIG_IGN); // the terminal sends them to the program too; we wait for it
    signal(SIGQUIT, SIG_IGN);
    signal(SIGTERM, forward_signal);
    signal(SIGHUP, forward_signal);
    int exec_errno = 0;
    const bool exec_failed = read(ready[0], &exec_errno, sizeof exec_errno) == sizeof exec_errno;
    close(ready[0]);
    // Who the child is, read before it is reaped (a zombie keeps its /proc start time and
    // uid): the summary reads only the object this very process created.
    siginfo_t info{};
    while (waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOWAIT) < 0 &&
           errno == EINTR) {
    }
    child_process who;
    who.pid = static_cast<std::uint32_t>(child);
    for (const auto& e : env)
      if (e.rfind("GMEM_TRACE_SAVE=", 0) == 0) who.trace_save = e.substr(16);
    if (!gmem::trace::proc_identity(who.pid, &who.proc_start_ticks, &who.uid))
      who.proc_start_ticks = 0;
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    if (exec_failed)
      return fail(exec_errno == EACCES ? 126 : k_exit_cannot_run,
                  "cannot run " + a->command[0] + ": " + std::strerror(exec_errno));
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (!a->quiet) std::fputs(run_summary(who, a->command[0], status).c_str(), stderr);
    return code;
  };
}

} // namespace gmem::tools
