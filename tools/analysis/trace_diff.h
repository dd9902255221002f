// `gmem diff A B`: what changed between two traces, per call site. Typical use: two `gmem save`
// snapshots of one service an hour apart, or the traces of two runs of one job.
//
// An allocation is the same one in A and B when both traces are of the same process (pid and
// start time) and it has the same address, stack and size and (within 50 ms or 2% of its age:
// the writer refines its clock calibration as it runs) the same allocation time; then
//   added = live in B, not in A;  freed = live in A, not in B;  net = B - A.
// Traces of different processes share no allocation: added is all of B's, freed all of A's,
// and net still compares the two per site. Sites are matched by their symbolized frames
// (call_sites.h), so the same code in two runs is one row.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/format/trace_model.h"
#include "tools/analysis/call_sites.h"

namespace gmem::tools {

struct site_diff {
  call_site site; // from B when B has it, else from A
  std::uint64_t a_bytes = 0, a_count = 0;
  std::uint64_t b_bytes = 0, b_count = 0;
  std::uint64_t added_bytes = 0, added_count = 0;
  std::uint64_t freed_bytes = 0, freed_count = 0;
  std::int64_t net_bytes() const {
    return static_cast<std::int64_t>(b_bytes) - static_cast<std::int64_t>(a_bytes);
  }
  std::int64_t net_count() const {
    return static_cast<std::int64_t>(b_count) - static_cast<std::int64_t>(a_count);
  }
};

struct trace_diff {
  bool same_process = false;
  std::uint64_t a_now_ns = 0, b_now_ns = 0; // each trace's "now" (trace_facts.h)
  std::vector<site_diff> sites;             // net bytes descending, then added bytes, then id
  site_diff total;                          // sums over sites (site fields empty)
  // Per site and in total: b = a + added - freed (bytes and counts); totals are the sums; sorted.
  bool is_valid() const;
};

trace_diff build_trace_diff(const gmem::trace::trace& a, site_resolver& a_sites,
                            const gmem::trace::trace& b, site_resolver& b_sites);

} // namespace gmem::tools
