#include "tools/commands/run_summary.h"

#include <cstdlib>

#include <sys/wait.h>

#include <cstdio>
#include <cstring>

#include "common/escape.h"
#include "common/units.h"
#include "tools/analysis/leak_report.h"
#include "tools/commands/trace_source.h"

namespace gmem::tools {

// GMEM_TRACE_SAVE's file for `pid`: every %p becomes the pid, as the recorder expands it.
static std::string saved_path(std::string file, std::uint32_t pid) {
  const std::string p = std::to_string(pid);
  for (auto at = file.find("%p"); at != std::string::npos; at = file.find("%p", at + p.size()))
    file.replace(at, 2, p);
  return file;
}

std::string format_run_summary(const gmem::trace::trace* t, std::uint32_t pid,
                               const std::string& program, int wait_status,
                               const std::string& problem) {
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
  // Leaks as `gmem leaks` counts them: by call site (Python first), the default suppressions
  // (library-lifetime CUDA library allocations) listed apart.
  symbolizer symbols(module_ranges(*t));
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
  else if (leaks.sites.empty() && leaks.cached.empty())
    out += "gmem: no leaks: every allocation was freed or is suppressed\n";
  else if (leaks.sites.empty())
    out += "gmem: no leaks seen outside the frameworks' caches below\n";
  else
    out += "gmem: LEAKS: " + format_bytes(leaks.total_bytes) + " in " +
           std::to_string(leaks.total_count) + " allocations from " +
           std::to_string(leaks.sites.size()) + " call sites were never freed: gmem leaks " + p +
           "\n";
  // A framework's cache keeps what its tensors were freed into: say what it is and how to see
  // the tensors instead of calling it a leak.
  for (const framework_cache* c : leaks.caches) {
    std::uint64_t bytes = 0, count = 0;
    for (const auto& s : leaks.cached)
      if (s.cache == c) bytes += s.bytes, count += s.count;
    out += "gmem: " + std::string(c->cache) + " holds " + format_bytes(bytes) + " in " +
           std::to_string(count) + " allocations at exit: " + c->holds + "; " + c->advice + "\n";
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
    if (name == "GMEM_TRACE_SAVE" && !value.empty() && !t->info.saved_file)
      out += "gmem: trace saved to " + escape_text(saved_path(value, pid)) + " (GMEM_TRACE_SAVE)\n";
  if (t->info.saved_file) // the object was removed at exit (GMEM_TRACE_KEEP)
    out += "gmem: trace " + escape_text(t->info.source) + " (GMEM_TRACE_SAVE; gmem report " +
           escape_text(t->info.source) + " -o report.html)\n";
  else
    out += "gmem: trace " + escape_text(t->info.source) + " (gmem report " + p +
           " -o report.html; gmem clean " + p + " removes it)\n";
  return out;
}

std::string run_summary(std::uint32_t pid, const std::string& program, int wait_status) {
  auto r = open_trace(std::to_string(pid), {.events = false, .samples = false});
  // GMEM_TRACE_KEEP may have removed the object at exit: the saved copy, if there is one.
  const char* save = std::getenv("GMEM_TRACE_SAVE");
  if (!r.ok && r.error.code == k_exit_not_found && save != nullptr && *save != '\0')
    if (auto f = open_trace(saved_path(save, pid), {.events = false, .samples = false}); f.ok)
      r = std::move(f);
  if (!r.ok)
    return format_run_summary(
        nullptr, pid, program, wait_status,
        r.error.code == k_exit_not_found
            ? "the program made no CUDA call through libgmem.so, GMEM_TRACE=0, or "
              "GMEM_TRACE_KEEP removed its trace at exit"
            : r.error.message);
  return format_run_summary(&r.value, pid, program, wait_status, {});
}

} // namespace gmem::tools
