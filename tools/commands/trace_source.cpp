#include "tools/commands/trace_source.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/escape.h"
#include "profiler/reader/object_names.h"
#include "profiler/reader/pid_lookup.h"
#include "profiler/reader/trace_open.h"

namespace gmem::tools {
namespace {

// " (name)" for a uid, "" when it has none.
std::string user_name(std::uint32_t uid) {
  passwd pw{};
  passwd* found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) != 0 || found == nullptr) return {};
  return " (" + escape_text(found->pw_name) + ")";
}

bool mentions_permission(const std::string& s) {
  return s.find("ermission") != std::string::npos || s.find("EACCES") != std::string::npos;
}

tool_error bad_trace(const std::string& what, const gmem::trace::read_error& e,
                     const std::string& fix) {
  const exit_code code = mentions_permission(e.message) ? k_exit_permission : k_exit_bad_trace;
  const std::string msg = e.to_string(); // the reader may name the file itself
  return {code,
          (msg.find(what) != std::string::npos ? msg : what + ": " + msg) +
              (code == k_exit_permission ? "; run gmem as the user who ran the program, or as root"
                                         : fix)};
}

open_result open_by_pid(const std::string& target, const gmem::trace::read_options& opts) {
  open_result r;
  const auto pid = static_cast<std::uint32_t>(std::stoul(target));
  // Chosen by owner and /proc, never by a field another user could have written.
  const gmem::trace::pid_object found = gmem::trace::find_pid_object(pid);
  if (found.name.empty()) {
    const bool running = access(("/proc/" + target).c_str(), F_OK) == 0;
    if (!found.error.empty())
      r.error = {k_exit_not_found, "pid " + target + ": " + found.error};
    else
      r.error = {k_exit_not_found,
                 running ? "pid " + target +
                               " is running but has no gmem trace: is it running under gmem? "
                               "Start it with: gmem run -- COMMAND"
                         : "no process and no gmem trace with pid " + target +
                               " (gmem ps lists the traces on this host)"};
    return r;
  }
  auto res = gmem::trace::open_shm(found.name, opts);
  if (!res) {
    r.error = bad_trace("trace of pid " + target + " (/dev/shm/" + found.name + ")", res.error,
                        "; the object is damaged or the process died while writing it "
                        "(gmem clean " +
                            target + " removes it)");
    return r;
  }
  r.ok = true;
  r.value = std::move(res.value);
  // A dead pid's object is only a name someone chose: say whose it is when it is not ours.
  if (!found.running && found.uid != static_cast<std::uint32_t>(::geteuid()))
    r.note = "gmem: note: pid " + target +
             " is not running; this trace was left under its pid by uid " +
             std::to_string(found.uid) + user_name(found.uid) + " (/dev/shm/" + found.name + ")\n";
  return r;
}

// An object name from gmem ps ("gmem.PID.TICKS[.NONCE]", no slash): looked up in /dev/shm only,
// never in the working directory, where anybody may have left a file of that name.
open_result open_by_object_name(const std::string& target, const gmem::trace::read_options& opts) {
  open_result r;
  auto res = gmem::trace::open_shm(target, opts);
  if (res) {
    r.ok = true;
    r.value = std::move(res.value);
    return r;
  }
  const std::string file_note =
      access(target.c_str(), F_OK) == 0
          ? "; a file of that name in the working directory is read only as ./" + target
          : "";
  r.error = bad_trace("/dev/shm/" + target, res.error, "; gmem clean removes dead objects");
  r.error.message += file_note;
  return r;
}

open_result open_by_path(const std::string& target, const gmem::trace::read_options& opts) {
  std::uint32_t pid = 0;
  std::uint64_t ticks = 0;
  if (target.find('/') == std::string::npos && gmem::trace::parse_object_name(target, &pid, &ticks))
    return open_by_object_name(target, opts);
  open_result r;
  struct stat st {};
  if (stat(target.c_str(), &st) != 0) {
    const int err = errno;
    if (err == EACCES) {
      r.error = {k_exit_permission, target + ": permission denied"};
    } else {
      r.error = {k_exit_not_found, target + ": " + std::strerror(err) +
                                       " (expected a pid, a trace object name from gmem ps, or a "
                                       "file written by gmem save)"};
    }
    return r;
  }
  if (S_ISDIR(st.st_mode)) {
    r.error = {k_exit_not_found, target + ": is a directory, not a trace (expected a pid, a trace "
                                          "object name from gmem ps, or a file written by gmem "
                                          "save or GMEM_TRACE_SAVE)"};
    return r;
  }
  if (access(target.c_str(), R_OK) != 0) {
    r.error = {k_exit_permission, target + ": permission denied"};
    return r;
  }
  auto res = gmem::trace::open_file(target, opts);
  if (!res) {
    r.error = bad_trace(target, res.error,
                        "; the file is not a complete gmem trace (truncated, damaged, or written "
                        "by another gmem version)");
    return r;
  }
  r.ok = true;
  r.value = std::move(res.value);
  return r;
}

} // namespace

bool is_pid(const std::string& s) {
  return !s.empty() && s.size() < 11 && s.find_first_not_of("0123456789") == std::string::npos;
}

open_result open_trace(const std::string& target, const gmem::trace::read_options& opts) {
  return is_pid(target) ? open_by_pid(target, opts) : open_by_path(target, opts);
}

std::string trace_warnings(const gmem::trace::trace& t) {
  std::string w;
  const auto& l = t.losses;
  if (l.torn_records != 0)
    w += "gmem: warning: " + std::to_string(l.torn_records) +
         " records were being updated when the process stopped; they are left out\n";
  if (l.lost_events != 0)
    w += "gmem: warning: " + std::to_string(l.lost_events) + " of " + std::to_string(l.last_seq) +
         " events were lost (ring full); timelines start later\n";
  if (l.live_overflow != 0)
    w += "gmem: warning: the live table was full: " + std::to_string(l.live_overflow) +
         " allocations are not in leak or fragmentation reports\n";
  if (l.stack_overflow != 0)
    w += "gmem: warning: " + std::to_string(l.stack_overflow) + " stacks were not stored\n";
  return w;
}

} // namespace gmem::tools
