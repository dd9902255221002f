// Commands over the trace objects of this host: ps (list), save (copy to a file), clean
// (remove the objects of dead processes). Objects belong to whoever created them; clean
// removes only the caller's own unless root names a user (--user, --all-users).
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>
#include <pwd.h>
#include <unistd.h>

#include "common/escape.h"
#include "common/options.h"
#include "common/units.h"
#include "profiler/format/trace_clock.h"
#include "profiler/reader/pid_lookup.h"
#include "profiler/reader/process_identity.h"
#include "profiler/reader/retention.h"
#include "profiler/reader/trace_listing.h"
#include "profiler/reader/trace_open.h"
#include "profiler/reader/trace_save.h"
#include "tools/analysis/trace_facts.h"
#include "tools/commands/commands.h"
#include "tools/commands/exit_codes.h"
#include "tools/commands/trace_source.h"
#include "tools/render/json_output.h"

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

// "alice", or the uid in digits when it has no name.
std::string user_name(std::uint32_t uid) {
  char buf[4096];
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) return found->pw_name;
  return std::to_string(uid);
}

// A user name or a uid in digits.
bool uid_of_user(const std::string& user, std::uint32_t* uid) {
  char buf[4096];
  passwd pw{};
  passwd* found = nullptr;
  if (getpwnam_r(user.c_str(), &pw, buf, sizeof buf, &found) == 0 && found != nullptr) {
    *uid = found->pw_uid;
    return true;
  }
  if (!is_pid(user) || std::stoull(user) > 0xffffffffull) return false;
  *uid = static_cast<std::uint32_t>(std::stoull(user));
  return true;
}

// gmem ps's bounds: /dev/shm's entries looked at (anybody's), then the objects read and for how
// long. 300,000 empty files named like traces cost an unbounded `gmem ps` 17 s.
constexpr gmem::trace::scan_limits k_ps_scan{1'000'000, 1'000'000'000};
constexpr std::size_t k_ps_read_max = 4096;
constexpr std::uint64_t k_ps_read_ns = 500'000'000;

// The trace objects gmem ps shows, oldest start first: found within k_ps_scan, then read in
// turn, the caller's own first (those of running processes before the rest), then one of each
// other owner's at a time (by name), until
// k_ps_read_max objects or k_ps_read_ns; `*not_read` counts those left unread, `*scan_cut`
// says the walk of /dev/shm stopped early.
std::vector<gmem::trace::trace_entry> bounded_listing(std::uint64_t* not_read, bool* scan_cut) {
  gmem::trace::scan_stats scanned;
  std::vector<gmem::trace::trace_entry> found = gmem::trace::stat_traces(k_ps_scan, &scanned);
  *scan_cut = scanned.cut;
  const auto self = static_cast<std::uint32_t>(geteuid());
  std::map<std::uint32_t, std::vector<std::size_t>> by_owner; // by uid, each by name
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (std::size_t i = 0; i < found.size(); ++i)
    by_owner[found[i].owner_known ? found[i].uid : ~std::uint32_t{0}].push_back(i);
  std::vector<std::size_t> order; // the caller's own, then the others in turn
  if (auto own = by_owner.find(self); own != by_owner.end()) {
    // The caller's running processes before their ended traces: a host full of the caller's
    // old traces still shows what runs now.
    order = own->second;
    std::stable_partition(order.begin(), order.end(), [&](std::size_t i) {
      return gmem::trace::alive_as(found[i].pid, found[i].proc_start_ticks, self);
    });
    by_owner.erase(own);
  }
  for (std::size_t round = 0; order.size() < found.size(); ++round)
    for (const auto& [uid, indexes] : by_owner)
      if (round < indexes.size()) order.push_back(indexes[round]);
  std::vector<gmem::trace::trace_entry> out;
  const std::uint64_t deadline = gmem::trace::monotonic_ns() + k_ps_read_ns;
  for (std::size_t i : order) {
    if (out.size() >= k_ps_read_max || gmem::trace::monotonic_ns() >= deadline) break;
    gmem::trace::read_trace_entry(found[i]);
    out.push_back(std::move(found[i]));
  }
  *not_read = found.size() - out.size();
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.start_realtime_ns != b.start_realtime_ns ? a.start_realtime_ns < b.start_realtime_ns
                                                      : a.name < b.name;
  });
  return out;
}

} // namespace

command_fn add_ps(CLI::App& app) {
  auto* sub =
      app.add_subcommand("ps", "Traced processes on this host, running or not, with their memory "
                               "and owner. Objects the caller cannot read say why.");
  auto json = std::make_shared<bool>(false);
  sub->add_flag("--json", *json, "one JSON document instead of text");
  return [json]() -> int {
    std::uint64_t not_read = 0;
    bool scan_cut = false;
    const auto entries = bounded_listing(&not_read, &scan_cut);
    const auto policy = gmem::trace::retention_policy::from_options(options::from_env());
    const auto space = gmem::trace::shm_space_now();
    // Each owner's objects planned apart, as their own jobs plan them.
    const auto plan =
        gmem::trace::plan_retention_by_owner(entries, policy, space.total_bytes, unix_now_ns());
    nlohmann::json rows = nlohmann::json::array();
    std::string out;
    char line[512];
    std::snprintf(line, sizeof line, "%-8s %-10s %-12s %-19s %11s %11s %10s  %-24s %s\n", "PID",
                  "USER", "STATE", "STARTED", "LIVE", "RESERVED", "SHM", "OBJECT", "COMMAND");
    out += line;
    std::uint64_t kept_bytes = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& e = entries[i];
      if (e.state != gmem::trace::trace_state::running && !plan[i].evict)
        kept_bytes += e.allocated_bytes;
      const std::uint64_t live = e.live_bytes, reserved = e.reserved_bytes;
      const std::string& problem = e.problem;
      // An object we cannot read says nothing about its process: not "crashed".
      const char* state = problem.empty() ? gmem::trace::to_string(e.state) : "not readable";
      const std::string owner = e.owner_known ? user_name(e.uid) : "?";
      rows.push_back({{"pid", e.pid},
                      {"user", owner},
                      {"uid", e.uid},
                      {"state", state},
                      {"object", e.name},
                      {"start_unix_ns", e.start_realtime_ns},
                      {"live_bytes", live},
                      {"reserved_bytes", reserved},
                      {"command", e.command_line},
                      {"readable", problem.empty()},
                      {"problem", problem},
                      {"shm_bytes", e.allocated_bytes},
                      {"retention", plan[i].reason}});
      std::snprintf(line, sizeof line, "%-8u %-10s %-12s %-19s %11s %11s %10s  %-24s ", e.pid,
                    escape_text(owner).c_str(), state, clock_time(e.start_realtime_ns).c_str(),
                    format_bytes(live).c_str(), format_bytes(reserved).c_str(),
                    format_bytes(e.allocated_bytes).c_str(), escape_text(e.name).c_str());
      out += line;
      out += escape_text(problem.empty() ? e.command_line : "(" + problem + ")") + "\n";
      if (e.state != gmem::trace::trace_state::running) out += "         " + plan[i].reason + "\n";
    }
    if (!entries.empty())
      out += "\ntraces of ended processes kept: " + format_bytes(kept_bytes) + " of " +
             format_bytes(policy.keep_max.resolve(space.total_bytes)) +
             " (GMEM_TRACE_KEEP_MAX); /dev/shm free: " + format_bytes(space.free_bytes) +
             ". `gmem clean --expired` removes what is marked removed.\n";
    // What the bounds left out, counted (another user can fill /dev/shm with names).
    std::string left_out;
    if (not_read != 0)
      left_out = std::to_string(not_read) + " more objects named like traces were not read";
    if (scan_cut)
      left_out += std::string(left_out.empty() ? "" : "; ") +
                  "/dev/shm has more entries than gmem ps looks at";
    if (!left_out.empty())
      out += "\ngmem ps reads at most " + std::to_string(k_ps_read_max) + " objects, for " +
             format_duration_ns(k_ps_read_ns) +
             ", yours first, then each user's in turn: " + left_out +
             " (gmem leaks NAME reads one)\n";
    if (*json) return write_output("-", dump_json(rows, 2) + "\n") ? k_exit_ok : k_exit_io;
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
  sub->add_option("pid", a->pid, "PID or trace object name (gmem.PID.TICKS.NONCE)")->required();
  sub->add_option("file", a->file, "file to write")->required();
  return [a]() -> int {
    std::string name = a->pid, owner_note;
    if (is_pid(a->pid)) {
      const auto o = gmem::trace::find_pid_object(static_cast<std::uint32_t>(std::stoul(a->pid)));
      if (o.name.empty())
        return fail(k_exit_not_found,
                    !o.error.empty()
                        ? "pid " + a->pid + ": " + o.error
                        : "no gmem trace of pid " + a->pid +
                              ": is it running under gmem? (gmem ps lists the traces)");
      // A dead pid's object is only a name someone chose: saved under the pid only when it is
      // the caller's own; another user's is saved only when named (gmem ps lists it).
      const auto self = static_cast<std::uint32_t>(geteuid());
      if (!o.running && o.uid != self)
        return fail(k_exit_not_found,
                    "pid " + a->pid + " is not running and /dev/shm/" + o.name +
                        " was left under its pid by uid " + std::to_string(o.uid) + " (" +
                        escape_text(user_name(o.uid)) +
                        "), not by you: nothing shows it is that process's trace; to save it "
                        "anyway, name it: gmem save " +
                        o.name + " FILE");
      // Its header must name the same process as its name (open_shm refuses it otherwise).
      gmem::trace::read_options light;
      light.events = light.samples = light.live = false;
      light.max_copy_bytes = gmem::trace::k_light_read_bytes;
      if (const auto check = gmem::trace::open_shm(o.name, light); !check)
        return fail(k_exit_bad_trace, "pid " + a->pid + ": /dev/shm/" + o.name + ": " +
                                          escape_text(check.error.to_string()));
      name = o.name;
      if (o.uid != self)
        owner_note = " (pid " + a->pid + " of uid " + std::to_string(o.uid) + " (" +
                     escape_text(user_name(o.uid)) + "))";
    }
    std::string error;
    if (!gmem::trace::save_shm(name, a->file, &error))
      return fail(error.find("ermission") != std::string::npos ? k_exit_permission : k_exit_io,
                  "saving " + name + " to " + a->file + ": " + error);
    std::fprintf(stderr, "gmem: saved %s%s to %s\n", name.c_str(), owner_note.c_str(),
                 escape_text(a->file).c_str());
    return k_exit_ok;
  };
}

command_fn add_clean(CLI::App& app) {
  auto* sub = app.add_subcommand(
      "clean",
      "Remove your trace objects (and CUDA IPC registries, /dev/shm/gmem-ipc.*) of processes "
      "that are gone (all, or PID's). A running "
      "process's trace is kept unless --force. Root too removes only its own unless --user NAME "
      "or --all-users.");
  struct args {
    std::string pid, user;
    bool force = false, dry_run = false, all_users = false, expired = false;
  };
  auto a = std::make_shared<args>();
  sub->add_option("pid", a->pid, "only this process's traces");
  sub->add_flag("--force", a->force, "also remove the traces of running processes");
  sub->add_flag("-n,--dry-run", a->dry_run, "only say what would be removed");
  sub->add_option("--user", a->user, "the traces of this user (name or uid; others: root only)");
  sub->add_flag("--all-users", a->all_users, "the traces of every user (root only)");
  sub->add_flag("--expired", a->expired,
                "only the traces the retention budget removes (GMEM_TRACE_KEEP_MAX, _FREE, _AGE: "
                "what gmem ps marks 'removed')");
  return [a]() -> int {
    if (!a->pid.empty() && !is_pid(a->pid))
      return fail(k_exit_usage, "'" + a->pid + "' is not a pid");
    const auto self = static_cast<std::uint32_t>(geteuid());
    std::uint32_t only_uid = self;
    if (!a->user.empty()) {
      if (a->all_users) return fail(k_exit_usage, "--user and --all-users exclude each other");
      if (!uid_of_user(a->user, &only_uid))
        return fail(k_exit_not_found, "--user '" + a->user + "': no such user");
    }
    if ((a->all_users || only_uid != self) && self != 0)
      return fail(k_exit_permission,
                  "only root can remove other users' traces (--user, --all-users)");
    int matched = 0, removed = 0, kept = 0, failed = 0, others = 0, status = k_exit_ok;
    const auto entries = gmem::trace::list_traces();
    // --expired: each owner's budget over that owner's objects alone (root's --all-users too):
    // another user's objects, whatever their number, sizes or times, never expire yours.
    const auto plan = gmem::trace::plan_retention_by_owner(
        entries, gmem::trace::retention_policy::from_options(options::from_env()),
        gmem::trace::shm_space_now().total_bytes, unix_now_ns());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const auto& e = entries[i];
      if (!a->pid.empty() && std::to_string(e.pid) != a->pid) continue;
      if (a->expired && !plan[i].evict) continue;
      ++matched;
      if (!a->all_users && (!e.owner_known || e.uid != only_uid)) {
        ++others;
        continue;
      }
      const bool running = gmem::trace::process_alive(e.pid, e.proc_start_ticks);
      const std::string who = e.owner_known ? escape_text(user_name(e.uid)) : "?";
      if (running && !a->force) {
        std::printf("kept     %s (pid %u of %s is running; --force removes it)\n", e.name.c_str(),
                    e.pid, who.c_str());
        ++kept;
        continue;
      }
      if (a->dry_run) {
        std::printf("would remove %s (pid %u of %s, %s)\n", e.name.c_str(), e.pid, who.c_str(),
                    running ? "running" : "gone");
        continue;
      }
      std::string error;
      if (gmem::trace::remove_shm(e.name, &error)) {
        std::printf("removed  %s (pid %u of %s, %s)\n", e.name.c_str(), e.pid, who.c_str(),
                    running ? "running" : "gone");
        ++removed;
      } else {
        std::fprintf(stderr, "gmem: error: cannot remove /dev/shm/%s: %s\n", e.name.c_str(),
                     error.c_str());
        ++failed;
        status = error.find("ermission") != std::string::npos ? k_exit_permission : k_exit_io;
      }
    }
    // CUDA IPC registries left by processes that are gone (SIGKILL): same rules as traces.
    for (const auto& o : gmem::trace::list_ipc_registries()) {
      if (!a->pid.empty() && std::to_string(o.pid) != a->pid) continue;
      if (a->expired && o.running) continue;
      ++matched;
      if (!a->all_users && o.uid != only_uid) {
        ++others;
        continue;
      }
      const std::string who = escape_text(user_name(o.uid));
      if (o.running && !a->force) {
        std::printf("kept     %s (pid %u of %s is running; --force removes it)\n", o.name.c_str(),
                    o.pid, who.c_str());
        ++kept;
        continue;
      }
      const char* state = o.running ? "running" : "gone";
      if (a->dry_run) {
        std::printf("would remove %s (pid %u of %s, %s)\n", o.name.c_str(), o.pid, who.c_str(),
                    state);
        continue;
      }
      if (unlink(("/dev/shm/" + o.name).c_str()) == 0) {
        std::printf("removed  %s (pid %u of %s, %s)\n", o.name.c_str(), o.pid, who.c_str(), state);
        ++removed;
      } else {
        const int err = errno;
        std::fprintf(stderr, "gmem: error: cannot remove /dev/shm/%s: %s\n", o.name.c_str(),
                     std::strerror(err));
        ++failed;
        status = err == EACCES || err == EPERM ? k_exit_permission : k_exit_io;
      }
    }
    if (!a->pid.empty() && matched == 0)
      return fail(k_exit_not_found,
                  "no gmem trace of pid " + a->pid + " (gmem ps lists the traces)");
    std::printf("%d removed, %d kept, %d failed", removed, kept, failed);
    if (others != 0)
      std::printf("; %d of other users left alone (%s)", others,
                  self == 0 ? "--user NAME or --all-users" : "only root can remove them");
    std::printf("\n");
    return status;
  };
}

} // namespace gmem::tools
