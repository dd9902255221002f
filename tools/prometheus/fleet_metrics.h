// The exporter's metric set: decoded traces in, Prometheus metric families out. Pure (no
// /dev/shm, no clock, no HTTP), so the golden tests pin the exact exposition text.
//
// Who may read what: the exporter often runs as root and anyone who reaches its port reads
// everything it serves, so a process is named by pid, uid, user, start_time and exe (the base
// name of its executable as /proc/PID/exe names it, never argv[0], which a program sets); call
// sites (`frame`, `caller`: function names and source paths) are exported only for the
// exporter's own uid, or for everyone with --expose-all-users; command lines (label `command`:
// they hold tokens and paths) only with --command-line, for the same processes.
//
// Label cardinality is bounded by construction: per process (uid, pid, start_time) one
// series per metric and device, plus at most 2K call-site series per site metric (the top K
// sites by live bytes, united with the top K by growth over the window); the number of
// processes is capped by the collector (--max-processes). A site label is a 12-hex-digit id
// (a hash of its symbolized frames, stable across scrapes and runs of the same binaries) and
// its first meaningful frame, cut to 120 bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <prometheus/metric_family.h>

#include "profiler/format/trace_model.h"
#include "tools/analysis/call_sites.h"
#include "tools/prometheus/exporter_options.h"

namespace gmem::tools {

// What the collector saw in /dev/shm during one scrape, for the exporter's own metrics.
struct scrape_health {
  std::uint64_t traces_found = 0;       // objects in /dev/shm
  std::uint64_t exported = 0;           // processes in this scrape
  std::uint64_t skipped_unreadable = 0; // other users' traces, or permission denied
  std::uint64_t skipped_bad = 0;        // corrupt, truncated, other format version
  std::uint64_t skipped_old = 0;        // ended longer than --keep-exited ago
  std::uint64_t skipped_limit = 0;      // over --max-processes or --max-per-user
  std::uint64_t vanished = 0;           // gone between listing and reading
  std::uint64_t duplicate = 0;          // a second object for the same uid, pid and start time
  std::uint64_t over_budget = 0;        // not read: the scrape had spent --scrape-budget
  double last_scrape_seconds = 0;       // duration of the previous scrape
  std::uint64_t scrapes = 0;            // scrapes served before this one
};

// Whose process a trace is, as the collector established it (the object's owner, not a field
// of the trace), and how much of it may be shown.
struct process_owner {
  std::uint32_t uid = 0;
  std::string user;          // the account's name, or the uid in digits when it has none
  bool details = false;      // call sites: own uid, or --expose-all-users
  std::string exe;           // /proc/PID/exe while it ran ("" unknown): executable_path()
  bool command_line = false; // label command: details and --command-line
};

class fleet_metrics {
public:
  fleet_metrics();
  // One process: its per-device counters and, with owner.details, its command line and top
  // call sites (`sites` caches the process's symbolized stacks across scrapes; unused and may
  // be null without details).
  void add_process(const gmem::trace::trace& t, site_resolver* sites, const process_owner& owner,
                   const exporter_options& options);
  void add_health(const scrape_health& h);
  // The families with at least one sample, in a fixed order.
  std::vector<prometheus::MetricFamily> take();
  // Samples added so far.
  std::size_t series() const { return series_; }

private:
  prometheus::ClientMetric&
  sample(const char* family, std::vector<prometheus::ClientMetric::Label> labels, double value);
  std::vector<prometheus::MetricFamily> families_;
  std::unordered_map<std::string, std::size_t> index_;
  std::size_t series_ = 0;
};

// Label value for a command line: escaped (escape_text), at most 100 bytes.
std::string command_label(const std::string& command_line);
// The executable of a process: owner.exe (/proc/PID/exe, read by the collector while the
// process ran), else the trace's main program (its first module, which the recorder names by
// /proc/self/exe); never argv[0].
std::string_view executable_path(const gmem::trace::trace& t, const process_owner& owner);
// Label value for the executable: the base name of `path` (" (deleted)" dropped), escaped, at
// most 100 bytes.
std::string exe_label(std::string_view path);

} // namespace gmem::tools
