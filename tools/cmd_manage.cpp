// Commands over the trace objects of this host: ps (list), save (copy to a file), clean
// (remove the objects of dead processes).
#include <cstdio>
#include <ctime>
#include <memory>

#include "common/units.h"
#include "tools/commands.h"
#include "tools/exit_codes.h"
#include "tools/json_output.h"
#include "tools/trace_source.h"

namespace gmem::tools {
namespace {

std::string clock_time(std::uint64_t unix_ns) {
  if (unix_ns == 0) return "-";
  const auto secs = static_cast<std::time_t>(unix_ns / 1'000'000'000u);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%d %H:%M:%S", &tm);
  return b;
}

} // namespace

command_fn add_ps(CLI::App& app) {
  auto* sub =
      app.add_subcommand("ps", "Traced processes on this host, running or not, with their memory.");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "one JSON document instead of text");
  return [json]() -> int {
    const auto entries = gmem::trace::list_traces();
    nlohmann::json rows = nlohmann::json::array();
    std::string out;
    char line[512];
    std::snprintf(line, sizeof line, "%-8s %-8s %-19s %11s %11s  %-24s %s\n", "PID", "STATE",
                  "STARTED", "LIVE", "RESERVED", "OBJECT", "COMMAND");
    out += line;
    for (const auto& e : entries) {
      std::uint64_t live = 0, reserved = 0;
      std::string problem = e.problem;
      if (e.readable) {
        auto r = gmem::trace::open_shm(e.name, {.events = false, .samples = false});
        if (r) {
          for (const auto& d : r.value.devices) {
            live += d.stats.live_bytes;
            reserved += d.stats.reserved_bytes;
          }
        } else {
          problem = r.error.to_string();
        }
      }
      const char* state = gmem::trace::to_string(e.state);
      rows.push_back({{"pid", e.pid},
                      {"state", state},
                      {"object", e.name},
                      {"start_unix_ns", e.start_realtime_ns},
                      {"live_bytes", live},
                      {"reserved_bytes", reserved},
                      {"command", e.command_line},
                      {"readable", e.readable && problem.empty()},
                      {"problem", problem}});
      std::snprintf(line, sizeof line, "%-8u %-8s %-19s %11s %11s  %-24s %s\n", e.pid, state,
                    clock_time(e.start_realtime_ns).c_str(), format_bytes(live).c_str(),
                    format_bytes(reserved).c_str(), e.name.c_str(),
                    problem.empty() ? e.command_line.c_str()
                                    : ("(unreadable: " + problem + ")").c_str());
      out += line;
    }
    if (*json) return write_output("-", rows.dump(2) + "\n") ? k_exit_ok : k_exit_io;
    if (entries.empty())
      out = "No gmem traces on this host. Start a program with: gmem run -- COMMAND\n";
    return write_output("-", out) ? k_exit_ok : k_exit_io;
  };
}

command_fn add_save(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "save",
      "Copy the trace of PID (running or not) to FILE, readable later by every read command.");
  struct args {
    std::string pid, file;
  };
  auto a = std::make_shared<args>();
  sub->add_option("pid", a->pid, "PID or trace object name (gmem.PID.TICKS)")->required();
  sub->add_option("file", a->file, "file to write")->required();
  return [a]() -> int {
    std::string name = a->pid;
    if (is_pid(a->pid)) {
      name.clear();
      for (const auto& e : gmem::trace::list_traces())
        if (std::to_string(e.pid) == a->pid) name = e.name;
      if (name.empty())
        return fail(k_exit_not_found, "no gmem trace of pid " + a->pid +
                                          ": is it running under gmem? (gmem ps lists the traces)");
    }
    std::string error;
    if (!gmem::trace::save_shm(name, a->file, &error))
      return fail(error.find("ermission") != std::string::npos ? k_exit_permission : k_exit_io,
                  "saving " + name + " to " + a->file + ": " + error);
    std::fprintf(stderr, "gmem: saved %s to %s\n", name.c_str(), a->file.c_str());
    return k_exit_ok;
  };
}

command_fn add_clean(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "clean", "Remove the trace objects of processes that are gone (all, or PID's). A running "
               "process's trace is kept unless --force.");
  struct args {
    std::string pid;
    bool force = false, dry_run = false;
  };
  auto a = std::make_shared<args>();
  sub->add_option("pid", a->pid, "only this process's traces");
  sub->add_flag("--force", a->force, "also remove the traces of running processes");
  sub->add_flag("-n,--dry-run", a->dry_run, "only say what would be removed");
  return [a]() -> int {
    if (!a->pid.empty() && !is_pid(a->pid))
      return fail(k_exit_usage, "'" + a->pid + "' is not a pid");
    int matched = 0, removed = 0, kept = 0, failed = 0, status = k_exit_ok;
    for (const auto& e : gmem::trace::list_traces()) {
      if (!a->pid.empty() && std::to_string(e.pid) != a->pid) continue;
      ++matched;
      const bool running = gmem::trace::process_alive(e.pid, e.proc_start_ticks);
      if (running && !a->force) {
        std::printf("kept     %s (pid %u is running; --force removes it)\n", e.name.c_str(), e.pid);
        ++kept;
        continue;
      }
      if (a->dry_run) {
        std::printf("would remove %s (pid %u, %s)\n", e.name.c_str(), e.pid,
                    running ? "running" : "gone");
        continue;
      }
      std::string error;
      if (gmem::trace::remove_shm(e.name, &error)) {
        std::printf("removed  %s (pid %u, %s)\n", e.name.c_str(), e.pid,
                    running ? "running" : "gone");
        ++removed;
      } else {
        std::fprintf(stderr, "gmem: error: cannot remove /dev/shm/%s: %s\n", e.name.c_str(),
                     error.c_str());
        ++failed;
        status = error.find("ermission") != std::string::npos ? k_exit_permission : k_exit_io;
      }
    }
    if (!a->pid.empty() && matched == 0)
      return fail(k_exit_not_found,
                  "no gmem trace of pid " + a->pid + " (gmem ps lists the traces)");
    std::printf("%d removed, %d kept, %d failed\n", removed, kept, failed);
    return status;
  };
}

} // namespace gmem::tools
