// Leak growth for long-running services: how much each call site's outstanding bytes grew over
// a recent window. A server that holds gigabytes of stable weights and leaks a few kilobytes a
// minute at one site shows that site first here, where `gmem leaks` (largest holder first)
// would bury it.
//
// growth(site) = outstanding(now) - outstanding(now - window)
//              = live allocations of the site made inside the window (the live table)
//              - bytes the window freed of the site's allocations made before it (events).
// The second term needs the alloc event of each freed allocation (its stack); when the event
// ring lost those, the bytes are counted in unknown_freed_bytes and the window is reported as
// incomplete instead of being charged to a site.
#pragma once

#include <cstdint>
#include <vector>

#include "profiler/format/trace_model.h"
#include "tools/analysis/call_sites.h"

namespace gmem::tools {

struct site_growth {
  std::size_t site = 0;          // index in the site_resolver
  std::int64_t growth_bytes = 0; // outstanding now - outstanding at the window's start
  std::uint64_t live_bytes = 0;  // outstanding now (requested sizes)
  std::uint64_t live_count = 0;
  std::uint64_t new_live_bytes = 0; // of live_bytes: allocated inside the window
  std::uint64_t new_live_count = 0;
  std::uint64_t freed_old_bytes = 0; // freed inside the window, allocated before it
  std::uint64_t freed_old_count = 0;
  std::uint64_t allocs_in_window = 0; // alloc events inside the window (freed again or not)
};

struct growth_report {
  std::uint64_t window_ns = 0; // as asked
  std::uint64_t from_ns = 0;   // window start on the trace's clock
  std::uint64_t now_ns = 0;
  // Events before the window's start are missing (lost, or recording started later): frees of
  // older allocations could not all be attributed.
  bool incomplete = false;
  std::uint64_t oldest_event_ns = 0;     // time of the oldest decoded event (0: none)
  std::uint64_t unknown_freed_bytes = 0; // freed in the window, allocation not in the trace
  std::uint64_t unknown_freed_count = 0;
  std::vector<site_growth> sites; // sorted: growth descending, then live bytes, then id
  std::size_t hidden_sites = 0;   // cut by `top`
  // Sorted as promised; per site growth == new_live - freed_old.
  bool is_valid() const;
};

// Every site with live or windowed activity; `top` (0 = all) keeps the first N.
growth_report build_growth_report(const gmem::trace::trace& t, site_resolver& sites,
                                  std::uint64_t window_ns, std::size_t top = 0);

} // namespace gmem::tools
