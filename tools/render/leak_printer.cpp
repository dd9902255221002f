#include <cstdio>

#include "common/escape.h"
#include "common/units.h"
#include "tools/analysis/leak_report.h"
#include "tools/render/printers.h"

namespace gmem::tools {
namespace {

std::string basename_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string join_ints(const std::vector<int>& v) {
  std::string s;
  for (const int d : v)
    s += (s.empty() ? "" : ",") + (d < 0 ? std::string("host") : std::to_string(d));
  return s;
}

} // namespace

std::string verdict_text(const leak_site& s, const leak_report& r) {
  const std::string rate = growth_rate_text(s.trend);
  if (s.verdict == leak_verdict::held)
    return "held: allocated a bounded number of times and kept, not growing";
  if (s.trend.growing)
    return "leak: grows as the program repeats" + (rate.empty() ? "" : ", " + rate);
  return r.native_ended ? "leak: never freed before the program exited" : "leak";
}

std::string plural(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string frame_head(const frame_info& f, std::size_t index, const print_options& o) {
  char idx[32];
  std::snprintf(idx, sizeof idx, "    #%-2zu ", index);
  std::string out = idx + escape_text(f.name());
  if (!f.file.empty())
    out +=
        " at " + escape_text(o.full_paths ? f.file + ":" + std::to_string(f.line) : f.location());
  return out;
}

std::string describe_source(const gmem::trace::trace& t) {
  std::string s = "pid " + std::to_string(t.info.pid);
  if (!t.info.command_line.empty()) s += " (" + escape_text(t.info.command_line) + ")";
  s += ", ";
  s += gmem::trace::to_string(t.info.state);
  s += t.info.saved_file ? ", saved file " : ", ";
  s += escape_text(t.info.source);
  return s;
}

namespace {

std::string print_frames(const leak_site& s, const print_options& o) {
  std::string out;
  if (s.frames.empty() && s.folded == 0)
    out += "    (no stack recorded: GMEM_STACK_DEPTH=0 or capture failed)\n";
  for (std::size_t i = 0; i < s.frames.size() && i < o.frames; ++i) {
    const frame_info& f = s.frames[i];
    out += frame_head(f, i, o) + " (" +
           escape_text(o.full_paths ? f.module : basename_of(f.module)) +
           (f.note.empty() ? "" : ", " + f.note) + ")\n";
  }
  if (s.frames.size() > o.frames)
    out += "    ... " + plural(s.frames.size() - o.frames, "more frame", "more frames") +
           " (--frames)\n";
  if (s.python_frames == 0 && s.note != gmem::trace::python_note::none)
    out += "    (" + describe(s.note) + ")\n";
  for (std::size_t i = 0; i < s.frames.size() && i < o.frames; ++i)
    if (!s.frames[i].via.empty()) {
      out += std::string("    (") + k_lent_note + ")\n";
      break;
    }
  if (s.folded > 0)
    out += "    (" + plural(s.folded, "native frame", "native frames") +
           " of runtime and interpreter internals folded: --native, --all-frames)\n";
  if (s.python_folded > 0)
    out += "    (" + plural(s.python_folded, "Python frame", "Python frames") +
           " of frameworks' own code folded: --all-frames)\n";
  return out;
}

std::string print_cached(const leak_report& r) {
  std::string out;
  for (const framework_cache* c : r.caches) {
    std::uint64_t bytes = 0, count = 0, n_sites = 0;
    for (const auto& s : r.cached)
      if (s.cache == c) bytes += s.bytes, count += s.count, ++n_sites;
    out += std::string(c->cache) + ": " + format_bytes(bytes) + " in " +
           plural(count, "allocation", "allocations") + " from " +
           plural(n_sites, "call site", "call sites") + " are " +
           cache_note(*c, r.observed(c), r.tensor_bytes) + ":\n";
    for (const auto& s : r.cached)
      if (s.cache == c)
        out += "    " + format_bytes(s.bytes) + " in " +
               plural(s.count, "allocation", "allocations") + ": " + escape_text(site_summary(s)) +
               "\n";
    out += "\n";
  }
  return out;
}

std::string cached_summary(const leak_report& r) {
  std::string out;
  for (const framework_cache* c : r.caches) {
    std::uint64_t bytes = 0, count = 0;
    for (const auto& s : r.cached)
      if (s.cache == c) bytes += s.bytes, count += s.count;
    out += "; " + format_bytes(bytes) + " in " + plural(count, "allocation", "allocations") +
           " held by " + c->cache;
  }
  return out;
}

// One line per site of a list apart (held sites, or the leaks under --verdict held).
std::string print_apart(const leak_report& r) {
  if (r.held_sites.empty()) return {};
  const bool held = r.verdicts != leak_filter::show::held;
  std::string out =
      held ? "Held, not leaks: " + format_bytes(r.held_sites_bytes) + " in " +
                 plural(r.held_sites_count, "allocation", "allocations") + " from " +
                 plural(r.held_sites.size(), "call site", "call sites") +
                 " allocated a bounded number of times and kept (weights, optimizer state, "
                 "globals, bounded caches; --all lists them as leaks):\n"
           : "Leaks: " + format_bytes(r.held_sites_bytes) + " in " +
                 plural(r.held_sites_count, "allocation", "allocations") + " (--verdict leak):\n";
  for (const auto& s : r.held_sites)
    out += "    " + format_bytes(s.bytes) + " in " + plural(s.count, "allocation", "allocations") +
           ": " + escape_text(site_summary(s)) + "\n";
  return out + "\n";
}

std::string print_suppressed(const leak_report& r) {
  if (r.suppressed.empty()) return {};
  std::string out = "Suppressed: " + format_bytes(r.suppressed_bytes) + " in " +
                    plural(r.suppressed_count, "allocation", "allocations") +
                    " that live as long as the process by design (not leaks; --suppressions "
                    "FILE adds patterns):\n";
  for (const auto& s : r.suppressed)
    out += "    " + format_bytes(s.bytes) + " in " + plural(s.count, "allocation", "allocations") +
           ", " + escape_text(s.suppressed_by) + ": " + escape_text(site_summary(s)) + "\n";
  return out + "\n";
}

} // namespace

std::string print_leaks(const gmem::trace::trace& t, const leak_report& r, const print_options& o) {
  std::string out = "gmem leaks: " + describe_source(t) + "\n";
  if (r.process_alive)
    out += "The process is still running: outstanding allocations may yet be freed.\n";
  if (r.held_count > 0)
    out += "Marked 'held to exit': " + plural(r.held_count, "allocation", "allocations") + " (" +
           format_bytes(r.held_bytes) +
           ") the program still held when its code ended, freed only by the interpreter's "
           "shutdown (module globals and the like).\n";
  if (r.incomplete)
    out += "warning: the live table overflowed (" + std::to_string(t.losses.live_overflow) +
           " allocations not recorded); totals are a lower bound.\n";
  if (r.native_ended && r.verdicts == leak_filter::show::leaks)
    out += "A native program that exited: what it never freed is a leak; growing sites first.\n";
  if (r.sites.empty()) {
    out += r.all_count == 0 ? "No outstanding allocations.\n"
           : r.verdicts == leak_filter::show::held && r.held_sites_count > 0
               ? "Nothing held: every outstanding allocation of the program's own is a leak.\n"
           : r.held_sites_count > 0
               ? "No leaks: no call site's outstanding memory grows as the program repeats.\n"
           : r.all_count == r.suppressed_count
               ? "No leaks: every outstanding allocation is suppressed.\n"
           : r.all_count == r.suppressed_count + r.cached_count
               ? "No leaks seen: every outstanding allocation is held by a framework's cache "
                 "or suppressed.\n"
               : "No call site passes the filters (" +
                     plural(r.all_count, "allocation", "allocations") + ", " +
                     format_bytes(r.all_bytes) + " outstanding in all).\n";
    if (!r.held_sites.empty()) out += "\n" + print_apart(r);
    if (!r.cached.empty()) out += (r.held_sites.empty() ? "\n" : "") + print_cached(r);
    if (!r.suppressed.empty())
      out += (r.cached.empty() && r.held_sites.empty() ? "\n" : "") + print_suppressed(r);
    return out;
  }
  out += "\n";
  std::size_t n = 0;
  for (const auto& s : r.sites) {
    char head[64];
    std::snprintf(head, sizeof head, "#%zu ", ++n);
    out += head + format_bytes(s.bytes) + " in " + plural(s.count, "allocation", "allocations");
    out += ", oldest " + format_duration_ns(s.oldest_age_ns);
    if (s.count > 1) out += ", youngest " + format_duration_ns(s.youngest_age_ns);
    out += ", " + std::string(s.devices.size() == 1 && s.devices[0] < 0
                                  ? "host"
                                  : "device " + join_ints(s.devices));
    if (!(s.kinds.size() == 1 && s.kinds[0] == "device")) {
      out += " (";
      for (std::size_t i = 0; i < s.kinds.size(); ++i)
        out += (i ? "," : "") + s.kinds[i];
      out += ")";
    }
    if (s.held_count > 0)
      out += s.held_count == s.count ? ", held to exit"
                                     : ", " + std::to_string(s.held_count) + " held to exit";
    out += "\n    " + verdict_text(s, r) + "\n";
    out += print_frames(s, o);
    out += "\n";
  }
  out += print_apart(r);
  out += print_cached(r);
  out += print_suppressed(r);
  out += "SUMMARY: " + format_bytes(r.total_bytes) + " in " +
         plural(r.total_count, "allocation", "allocations") + " from " +
         plural(r.sites.size(), "call site", "call sites");
  if (r.hidden_sites > 0)
    out += "; " + plural(r.hidden_sites, "more site", "more sites") + " hidden by filters (" +
           format_bytes(r.all_bytes) + " in " + plural(r.all_count, "allocation", "allocations") +
           " in all)";
  if (r.suppressed_count > 0)
    out += "; " + format_bytes(r.suppressed_bytes) + " in " +
           plural(r.suppressed_count, "allocation", "allocations") + " suppressed";
  if (r.held_sites_count > 0 && r.verdicts != leak_filter::show::held)
    out += "; " + format_bytes(r.held_sites_bytes) + " in " +
           plural(r.held_sites_count, "allocation", "allocations") + " held, not leaks";
  out += cached_summary(r);
  out += ".\n";
  return out;
}

} // namespace gmem::tools
