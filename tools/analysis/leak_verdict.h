// Leak verdicts: is a call site's outstanding memory a leak (it grows as the program repeats)
// or memory the program holds (weights, optimizer state, globals, a bounded cache)? Computed by
// the readers from what the trace already holds: the survivors' allocation times (live table)
// and the site's allocations and frees (event ring). Every consumer (gmem leaks, gmem run's exit
// summary, gmem report, the exporter) asks here, so they agree.
//
// The rule, on the run's allocation clock (the number of allocations the whole program had made,
// so a burst of weights is short however long loading took, and a step of a training loop is as
// long as its allocations make it):
//   growing(site) = the site's survivors lie in at least k_leak_min_slices of the run's
//                   k_trend_slices equal slices, one at least in its first half (many
//                   executions, spread over the run: not one loop that fills a list at the end),
//               and its live count now exceeds the most it held at any point of the run's first
//                   half by at least max(k_leak_min_rise, live/8) allocations (still rising in
//                   the later part; a bounded cache that filled early, or one that evicts, does
//                   not), with more bytes too.
//   leak   = growing, or (a native program that exited) never freed: compute-sanitizer's rule,
//            since no shutdown of an interpreter could have freed it.
//   held   = otherwise: a bounded number of survivors, or survivors of one phase.
// Framework caches and suppressed sites are decided before (frameworks.h, suppressions.h).
// Limits (docs/tools.md): a program with fewer than 4 repetitions, or a single step, shows no
// growth; a bounded cache that fills slowly over the whole run looks like a leak.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "profiler/format/trace_model.h"

namespace gmem::tools {

enum class leak_verdict : std::uint8_t { leak, held, framework_cache, suppressed };
const char* to_string(leak_verdict v) noexcept; // "leak", "held", "framework_cache", "suppressed"

inline constexpr std::uint32_t k_trend_slices = 16;
inline constexpr std::uint32_t k_leak_min_slices = 4;
inline constexpr std::uint64_t k_leak_min_rise = 2;
inline constexpr std::uint64_t k_rate_window_ns = 300'000'000'000ull; // the rate's window: 5 min

// What the trace says about one site's outstanding memory over the run. Invariants:
// early_slices <= slices <= k_trend_slices; rise_count <= live_count; window_ns <= the run's
// length.
struct site_trend {
  std::uint64_t live_count = 0;   // outstanding now
  std::uint64_t live_bytes = 0;   // requested
  std::uint32_t slices = 0;       // slices of the run's allocation clock holding a survivor
  std::uint32_t early_slices = 0; // of them, in the run's first half
  // Live now minus the most live at any point of the run's first half (allocation clock).
  std::int64_t rise_count = 0;
  std::int64_t rise_bytes = 0;
  // Outstanding bytes now minus those at the window's start (now - window_ns): the rate.
  std::int64_t window_growth_bytes = 0;
  std::uint64_t window_ns = 0; // k_rate_window_ns, or the whole run when it is shorter
  bool growing = false;        // the rule above
};

// The rule's test on a trend's facts (sets nothing).
bool is_growing(const site_trend& tr);

// Trends of `site_count` sites. `site_of(stack_id, kind)` numbers an allocation's site
// (< site_count; site_count: not one of them). Survivors are `t.live`; the event ring, when
// loaded, gives the clock, the first half's most live and the window's frees; without it the
// clock is the trace's time and the first half counts the survivors made in it.
std::vector<site_trend>
site_trends(const gmem::trace::trace& t,
            const std::function<std::size_t(std::uint32_t, gmem::trace::alloc_kind)>& site_of,
            std::size_t site_count, std::uint64_t window_ns = k_rate_window_ns);

// A program with no Python frames that has ended (exited or died; a saved copy of a running
// process has not): what it never freed is a leak whatever its
// trend (the interpreter's shutdown frees a Python program's globals; nothing frees a native
// program's).
bool native_program_ended(const gmem::trace::trace& t);

// The verdict of a site that is neither a framework's cache nor suppressed.
leak_verdict verdict_of(const site_trend& tr, bool native_ended);

// "+1.00 MiB/min over the last 5 min" (or "over the last 42.0 s" for a shorter run); "" when
// the window did not grow.
std::string growth_rate_text(const site_trend& tr);

} // namespace gmem::tools
