#include "tools/commands/run_summary.h"

#include <cstdlib>

#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstring>

#include "common/escape.h"
#include "common/units.h"
#include "profiler/reader/pid_lookup.h"
#include "profiler/reader/trace_open.h"
#include "tools/analysis/leak_report.h"
#include "tools/commands/trace_source.h"
#include "tools/render/printers.h"

namespace gmem::tools {

// GMEM_TRACE_SAVE's file for `pid`: every %p becomes the pid, as the recorder expands it.
static std::string saved_path(std::string file, std::uint32_t pid) {
  const std::string p = std::to_string(pid);
  for (auto at = file.find("%p"); at != std::string::npos; at = file.find("%p", at + p.size()))
    file.replace(at, 2, p);
  return file;
}

// Leak sites the summary names, largest growing first.
constexpr std::size_t k_summary_sites = 3;

std::string format_run_summary(const gmem::trace::trace* t, std::uint32_t pid,
                               const std::string& program, int wait_status,
                               const std::string& problem, bool saved_ok) {
  const std::string p = std::to_string(pid);
  std::string out = "\ngmem: " + escape_text(program) + " (pid " + p + ") ";
  if (WIFEXITED(wait_status))
    out += "exited with status " + std::to_string(WEXITSTATUS(wait_status));
  else if (WIFSIGNALED(wait_status))
    out += std::string("was killed by signal ") + std::to_string(WTERMSIG(wait_status)) + " (" +
           strsignal(WTERMSIG(wait_status)) + ")";
  if (t == nullptr) return out + "\ngmem: no trace: " + escape_text(problem) + "\n";
  out += ", " +
         format_duration_ns(t->info.exit_realtime_ns > t->info.start_realtime_ns
                                ? t->info.exit_realtime_ns - t->info.start_realtime_ns
                                : 0) +
         " traced\n";
  std::uint64_t allocs = 0, hits = 0, fences = 0, ooms = 0;
  for (const auto& d : t->devices) {
    const auto& s = d.stats;
    allocs += s.total_allocs;
    hits += s.cache_hits;
    fences += s.fences;
    ooms += s.ooms;
    out += "gmem: " +
           (d.device < 0 ? std::string("host pool") : "device " + std::to_string(d.device)) +
           ": peak " + format_bytes(s.peak_live_bytes) + " live, " +
           format_bytes(s.peak_reserved_bytes) + " reserved; at exit " +
           format_bytes(s.live_bytes) + " live in " + std::to_string(s.live_blocks) + " blocks\n";
  }
  if (t->devices.empty()) out += "gmem: no pooled allocation was made\n";
  // Leaks as `gmem leaks` counts them: by call site (Python first), by verdict (held sites in
  // one line), the default suppressions (library-lifetime CUDA library allocations) apart.
  symbolizer symbols(module_ranges(*t));
  symbols.run_as(symbolizer_uid(*t));
  const suppression_list supp = suppression_list::defaults();
  leak_filter filter;
  filter.suppressions = &supp;
  const leak_report leaks = build_leak_report(*t, symbols, filter);
  char rate[32];
  std::snprintf(rate, sizeof rate, "%.1f%%",
                allocs ? 100.0 * static_cast<double>(hits) / static_cast<double>(allocs) : 0.0);
  out += "gmem: " + std::to_string(allocs) + " allocations, cache hit rate " + rate + ", " +
         std::to_string(fences) + " fences, " + std::to_string(ooms) + " out-of-memory errors\n";
  if (t->live.empty())
    out += "gmem: no leaks: every allocation was freed\n";
  else if (leaks.sites.empty() && leaks.cached.empty() && leaks.held_sites.empty())
    out += "gmem: no leaks: every allocation was freed or is suppressed\n";
  else if (leaks.sites.empty() && leaks.held_sites.empty())
    out += "gmem: no leaks seen outside the frameworks' caches below\n";
  else if (leaks.sites.empty())
    out += "gmem: no leaks: no call site's memory grew as the program repeated\n";
  else
    out += "gmem: LEAKS: " + format_bytes(leaks.total_bytes) + " in " +
           plural(leaks.total_count, "allocation", "allocations") + " from " +
           plural(leaks.sites.size(), "call site", "call sites") +
           (leaks.native_ended ? " were never freed" : " grew as the program repeated") +
           (leaks.held_count == 0
                ? std::string()
                : " (" + std::to_string(leaks.held_count) +
                      " of them still held when the program's code ended, freed only by the "
                      "interpreter's shutdown)") +
           ": gmem leaks " + p + "\n";
  // The largest leaks by name, growing ones first: what to fix without another command.
  for (std::size_t i = 0; i < leaks.sites.size() && i < k_summary_sites; ++i) {
    const leak_site& s = leaks.sites[i];
    const std::string growth = growth_rate_text(s.trend);
    out += "gmem:   " + format_bytes(s.bytes) + " in " +
           plural(s.count, "allocation", "allocations") + " at " + escape_text(site_summary(s)) +
           (s.trend.growing && !growth.empty() ? ", " + growth : "") + "\n";
  }
  if (leaks.sites.size() > k_summary_sites)
    out += "gmem:   ... " +
           plural(leaks.sites.size() - k_summary_sites, "more site", "more sites") + "\n";
  if (!leaks.held_sites.empty())
    out += "gmem: held all run: " + format_bytes(leaks.held_sites_bytes) + " in " +
           plural(leaks.held_sites_count, "allocation", "allocations") + " from " +
           plural(leaks.held_sites.size(), "site", "sites") +
           ", not leaks (allocated a bounded number of times and kept; gmem leaks " + p +
           " --verdict held)\n";
  // A framework's cache keeps what its tensors were freed into: say what it is and how to see
  // the tensors instead of calling it a leak.
  for (const framework_cache* c : leaks.caches) {
    std::uint64_t bytes = 0, count = 0;
    for (const auto& s : leaks.cached)
      if (s.cache == c) bytes += s.bytes, count += s.count;
    out += "gmem: " + std::string(c->cache) + " holds " + format_bytes(bytes) + " in " +
           plural(count, "allocation", "allocations") +
           " at exit: " + cache_note(*c, leaks.observed(c), leaks.tensor_bytes) + "\n";
  }
  if (leaks.suppressed_count > 0)
    out += "gmem: suppressed: " + format_bytes(leaks.suppressed_bytes) + " in " +
           std::to_string(leaks.suppressed_count) + " allocations from " +
           std::to_string(leaks.suppressed.size()) +
           " call sites that live as long as the process by design (CUDA library handles and "
           "workspaces, pinned host caches; gmem leaks lists them)\n";
  if (t->losses.lost_events || t->losses.live_overflow)
    out += "gmem: note: " + std::to_string(t->losses.lost_events) + " events lost, " +
           std::to_string(t->losses.live_overflow) + " allocations not in the live table\n";
  for (const auto& [name, value] : t->info.options)
    if (name == "GMEM_TRACE_SAVE" && !value.empty() && !t->info.saved_file && saved_ok)
      out += "gmem: trace saved to " + escape_text(saved_path(value, pid)) + " (GMEM_TRACE_SAVE)\n";
  if (t->info.saved_file) // the object was removed at exit (GMEM_TRACE_KEEP)
    out += "gmem: trace " + escape_text(t->info.source) + " (GMEM_TRACE_SAVE; gmem report " +
           escape_text(t->info.source) + " -o report.html)\n";
  else
    out += "gmem: trace " + escape_text(t->info.source) + " (gmem report " + p +
           " -o report.html; gmem clean " + p + " removes it)\n";
  return out;
}

std::string check_saved_trace(const std::string& path, const child_process& child) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return std::string("not written: ") + std::strerror(errno);
  if (S_ISLNK(st.st_mode)) return "a symbolic link is there, not the trace";
  if (!S_ISREG(st.st_mode)) return "not a regular file, not the trace";
  if (st.st_uid != child.uid)
    return "owned by uid " + std::to_string(st.st_uid) + ", not by uid " +
           std::to_string(child.uid) + " that the program ran as: not its trace";
  auto f = gmem::trace::open_file(path, {.events = false, .samples = false, .live = false});
  if (!f) return "not a trace: " + f.error.to_string();
  if (f.value.info.pid != child.pid || f.value.info.proc_start_ticks != child.proc_start_ticks)
    return "holds the trace of another process (pid " + std::to_string(f.value.info.pid) + ")";
  return {};
}

std::string run_summary(const child_process& child, const std::string& program, int wait_status) {
  const std::uint32_t pid = child.pid;
  const std::string saved = child.trace_save.empty() ? "" : saved_path(child.trace_save, pid);
  const std::string save_problem = saved.empty() ? "" : check_saved_trace(saved, child);
  open_result r;
  r.error = {k_exit_not_found, ""};
  // Only the object the child created: any other object named after its pid (a planted one,
  // an earlier process's) is not its trace.
  const auto found = child.proc_start_ticks != 0
                         ? gmem::trace::find_child_object(pid, child.proc_start_ticks, child.uid)
                         : gmem::trace::pid_object{};
  if (!found.name.empty()) {
    // The events decide the leak verdicts (leak_verdict.h).
    auto res = gmem::trace::open_shm(found.name, {.events = true, .samples = false});
    if (res) {
      r.ok = true;
      r.value = std::move(res.value);
    } else {
      r.error = {k_exit_bad_trace, "/dev/shm/" + found.name + ": " + res.error.to_string()};
    }
  } else if (!found.error.empty()) {
    r.error = {k_exit_not_found, found.error};
  }
  // GMEM_TRACE_KEEP may have removed the object at exit: the saved copy, if it is the child's.
  if (!r.ok && r.error.code == k_exit_not_found && !saved.empty() && save_problem.empty())
    if (auto f = gmem::trace::open_file(saved, {.events = true, .samples = false}); f) {
      r.ok = true;
      r.value = std::move(f.value);
    }
  std::string out;
  if (!r.ok)
    out = format_run_summary(
        nullptr, pid, program, wait_status,
        r.error.code == k_exit_not_found
            ? (r.error.message.empty() ? "" : r.error.message + "; ") +
                  "the program made no CUDA call through libgmem.so, GMEM_TRACE=0, or "
                  "GMEM_TRACE_KEEP removed its trace at exit"
            : r.error.message);
  else
    out = format_run_summary(&r.value, pid, program, wait_status, {}, save_problem.empty());
  if (!saved.empty() && !save_problem.empty())
    out += "gmem: GMEM_TRACE_SAVE: " + escape_text(saved) + ": " + escape_text(save_problem) +
           "; the trace was not saved there\n";
  return out;
}

} // namespace gmem::tools
