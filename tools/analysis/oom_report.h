// `gmem oom`: every out-of-memory failure the trace recorded, each with the pool's counters at
// the failure (the OOM snapshot sample) and the call sites that held the most memory then.
//
// Holders at the failure are rebuilt by replaying the event ring up to the OOM event, which is
// exact when the ring still holds every event before it (it starts at seq 1). Otherwise the
// allocations of the live table made before the failure stand in (a lower bound: what was
// freed since is missing) and `holders_exact` is false.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pool/stats.h"
#include "profiler/format/trace_model.h"
#include "tools/analysis/call_sites.h"

namespace gmem::tools {

struct oom_holder {
  std::size_t site = 0; // index in the site_resolver
  std::uint64_t bytes = 0;
  std::uint64_t count = 0;
};

struct oom_entry {
  std::uint64_t seq = 0;
  std::uint64_t time_ns = 0;
  int device = 0;
  std::uint32_t thread = 0;
  std::uint64_t requested = 0;
  std::optional<pool_stats> at_failure; // the snapshot sample, when it survived in the ring
  std::vector<oom_holder> holders;      // largest first, at most `top`
  std::uint64_t held_bytes = 0;         // by every holder on that device
  bool holders_exact = false;
};

struct oom_report {
  std::vector<oom_entry> ooms;    // in recording order
  std::uint64_t counted_ooms = 0; // the pools' own counters (may exceed ooms: lost events)
};

oom_report build_oom_report(const gmem::trace::trace& t, site_resolver& sites, std::size_t top = 5);

} // namespace gmem::tools
