// The exporter's prometheus::Collectable: on each scrape it lists the trace objects in
// /dev/shm, reads the ones to export through the hardened reader (no symlinks, regular files,
// a private copy: a writer is never blocked and a trace vanishing or changing mid-scrape is
// an error value, not a crash), and turns them into metric families (fleet_metrics.h).
//
// Whose traces: each object's owner is its uid (the file's, never a field of the trace). One
// object per (uid, pid, start time) is exported, at most --max-per-user of one user and
// --max-processes in all, in rank_entries()'s order; call sites (and the command line) only of
// the exporter's own uid unless --expose-all-users.
//
// Symbolized call sites are cached per trace object (one symbolizer and site_resolver each,
// rebuilt when the process loads new modules), so a scrape symbolizes only new stacks; the
// cache of an object that disappeared is dropped on the next scrape.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/collectable.h>

#include "profiler/reader/trace_listing.h"
#include "tools/analysis/call_sites.h"
#include "tools/prometheus/exporter_options.h"
#include "tools/prometheus/fleet_metrics.h"

namespace gmem::tools {

// A trace the scrape may export, and where it stands in the order of export.
struct ranked_entry {
  const gmem::trace::trace_entry* entry = nullptr;
  int tier = 0;         // 0 running, 1 ended, 2 claims a time in the future
  std::size_t turn = 0; // its place among its owner's traces of the same tier
};
// Orders the traces to export: running processes first, then ended ones, those whose times lie
// in the future last; within each, the exporter's own user (`me`) first, then users take turns
// (every user's newest by the start ticks of its name, then every user's second newest, ...),
// the smallest object first within a turn: no user's objects crowd out another's, and no time
// a trace claims moves it ahead. Pure: tests drive it.
void rank_entries(std::vector<ranked_entry>& wanted, std::uint64_t now_ns, std::uint32_t me);
// Keeps at most `per_user` of each owner's entries (from stat_traces(): nothing read yet):
// those whose process runs first, then the newest by the start ticks in their names; and
// orders them for reading: `me`'s first, running processes next, users taking turns, the
// fewest bytes first. Returns how many it dropped.
std::uint64_t preselect(std::vector<gmem::trace::trace_entry>& entries, std::size_t per_user,
                        std::uint32_t me);

class fleet_collector : public prometheus::Collectable {
public:
  explicit fleet_collector(exporter_options options);
  ~fleet_collector() override;
  fleet_collector(const fleet_collector&) = delete;
  fleet_collector& operator=(const fleet_collector&) = delete;
  std::vector<prometheus::MetricFamily> Collect() const override;

private:
  struct process_cache {
    std::size_t module_count = 0;
    std::unique_ptr<symbolizer> symbols;
    std::unique_ptr<site_resolver> sites;
  };
  // Under mu_, on the scrape thread.
  std::vector<prometheus::MetricFamily> collect_guarded() const;
  std::vector<prometheus::MetricFamily> collect_locked() const;
  std::string user_name(std::uint32_t uid) const; // cached in users_
  // /proc/PID/exe of a running process, remembered per object (exes_) for after it ended.
  std::string executable(const std::string& object, std::uint32_t pid, bool running) const;

  // Scrapes run on one thread of the collector's own, started by the first scrape and joined
  // by the destructor: libdw needs a deeper stack than civetweb's workers have, and the
  // symbolizer children forked during a scrape die with the thread that forked them
  // (PR_SET_PDEATHSIG), so that thread must live as long as their cache.
  struct scrape_thread;
  static void* scrape_main(void* self);

  exporter_options options_;
  mutable std::mutex mu_; // scrapes run one at a time; guards everything below
  mutable std::unique_ptr<scrape_thread> thread_;
  mutable std::map<std::string, process_cache> cache_;
  mutable scrape_health last_;
  mutable std::map<std::uint32_t, std::string> users_;
  mutable std::map<std::string, std::string> exes_; // object name -> /proc/PID/exe
};

} // namespace gmem::tools
