// The exporter's prometheus::Collectable: on each scrape it lists the trace objects in
// /dev/shm, reads the ones to export through the hardened reader (no symlinks, regular files,
// a private copy: a writer is never blocked and a trace vanishing or changing mid-scrape is
// an error value, not a crash), and turns them into metric families (fleet_metrics.h).
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

#include "tools/analysis/call_sites.h"
#include "tools/exporter/exporter_options.h"
#include "tools/exporter/fleet_metrics.h"

namespace gmem::tools {

class fleet_collector : public prometheus::Collectable {
public:
  explicit fleet_collector(exporter_options options) : options_(std::move(options)) {}
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

  exporter_options options_;
  mutable std::mutex mu_; // scrapes run one at a time; guards everything below
  mutable std::map<std::string, process_cache> cache_;
  mutable scrape_health last_;
};

} // namespace gmem::tools
