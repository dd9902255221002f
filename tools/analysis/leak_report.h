// Leak analysis: outstanding allocations grouped by call site (symbolized stack), sorted by
// bytes. Works on the decoded trace model; printing lives in text_printer / json_output.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/format/trace_model.h"
#include "tools/analysis/leak_verdict.h"
#include "tools/analysis/suppressions.h"
#include "tools/frameworks.h"
#include "tools/stack_view.h"
#include "tools/symbolizer.h"

namespace gmem::tools {

struct leak_filter {
  std::uint64_t min_age_ns = 0;                   // only allocations at least this old
  std::uint64_t max_age_ns = 0;                   // only allocations at most this old (0 = any)
  std::uint64_t min_time_ns = 0;                  // only allocations made at or after (trace time)
  std::uint64_t min_bytes = 0;                    // only sites whose total is at least this
  std::size_t top = 0;                            // at most this many sites (0 = all)
  frame_view view = frame_view::python_first;     // what a site shows and is grouped by
  const suppression_list* suppressions = nullptr; // sites matching are listed apart
  bool framework_caches = true; // sites of a framework's cache (frameworks.h) are listed apart
  // What `sites` lists: the leaks (held sites go to `held_sites`), the held sites only, or
  // every outstanding site as a leak whatever its verdict (compute-sanitizer's view).
  enum class show : std::uint8_t { leaks, held, all } verdicts = show::leaks;
  bool by_bytes = false; // `sites` by bytes only, growing or not (gmem top: what holds memory)
};

// One call site. Invariant: bytes = sum of the requested sizes of its `count` allocations;
// oldest_age_ns >= youngest_age_ns.
struct leak_site {
  std::vector<frame_info> frames; // innermost first: Python frames, then native (stack_view.h)
  std::size_t python_frames = 0;  // how many of `frames` are Python frames
  std::size_t folded = 0;         // native frames folded away (of the first stack seen)
  std::size_t python_folded = 0;  // frameworks' Python frames folded away (likewise)
  gmem::trace::python_note note = gmem::trace::python_note::none;
  std::string suppressed_by;              // "leak:PATTERN (ORIGIN)" when suppressed
  const framework_cache* cache = nullptr; // the framework cache that holds it, if any
  std::uint64_t bytes = 0;                // requested
  std::uint64_t rounded_bytes = 0;        // as served by the pool
  std::uint64_t count = 0;
  std::uint64_t held_count = 0; // of `count`: released only by the interpreter's shutdown
  std::uint64_t held_bytes = 0; // their requested bytes
  std::uint64_t oldest_age_ns = 0;
  std::uint64_t youngest_age_ns = 0;
  std::vector<int> devices;       // sorted, unique
  std::vector<std::string> kinds; // alloc kinds seen, e.g. "device", "host_pinned"
  // From the whole run, whatever the filters (leak_verdict.h): `trend` counts every survivor of
  // the site, not only the shown ones.
  leak_verdict verdict = leak_verdict::leak;
  site_trend trend;
};

// The order of `sites`: growing sites first by their window's growth, then by bytes, count and
// the printed stack.
bool site_before(const leak_site& a, const leak_site& b);

struct leak_report {
  std::vector<leak_site>
      sites; // the leaks (leak_filter::verdicts), sorted by site_before; filtered
  std::uint64_t total_bytes = 0; // of the shown sites
  std::uint64_t total_count = 0;
  // Of the shown sites: allocations the program still held when its code ended, released only
  // by the interpreter's shutdown (live_allocation::held).
  std::uint64_t held_bytes = 0;
  std::uint64_t held_count = 0;
  std::uint64_t all_bytes = 0; // of every outstanding allocation, before filtering
  std::uint64_t all_count = 0;
  std::size_t hidden_sites = 0; // filtered out
  // Suppressed sites (library-lifetime allocations), sorted like `sites`; not filtered, not in
  // the totals above, not counted by the exit status.
  std::vector<leak_site> suppressed;
  std::uint64_t suppressed_bytes = 0;
  std::uint64_t suppressed_count = 0;
  // Sites of frameworks' caches (frameworks.h): what the cache holds, not the program's
  // tensors; sorted like `sites`, not filtered, not in the totals, not counted by the exit
  // status. `caches` lists each cache seen once, in the order of its largest site.
  std::vector<leak_site> cached;
  std::uint64_t cached_bytes = 0;
  std::uint64_t cached_count = 0;
  std::vector<const framework_cache*> caches;
  // Sites whose verdict is held (leak_verdict.h), filtered like `sites`, sorted by bytes; not
  // in the totals, not counted by the exit status. Empty with leak_filter::show::all; with
  // show::held they are `sites` and this lists the leaks.
  std::vector<leak_site> held_sites;
  std::uint64_t held_sites_bytes = 0;
  std::uint64_t held_sites_count = 0;
  leak_filter::show verdicts = leak_filter::show::leaks;
  bool by_bytes = false;     // leak_filter's
  bool native_ended = false; // native_program_ended(): never freed = leak
  // Tensors the frameworks' allocators handed out (alloc_kind::tensor) and the program holds,
  // through the same age filters as the sites: each is also in `sites` (the program's), inside
  // a cache's site in `cached`. Suppressed ones (a library's workspace the cache served) are
  // not counted: their segments are suppressed too, not in `cached`.
  std::uint64_t tensor_bytes = 0;
  std::uint64_t tensor_count = 0;
  std::uint32_t observed_frameworks = 0; // trace_info's
  // The trace has `c`'s tensors one by one (its allocator was observed).
  bool observed(const framework_cache* c) const {
    return c != nullptr && c->observed_as >= 0 && (observed_frameworks >> c->observed_as & 1u);
  }
  bool process_alive = false; // a live process's "leaks" may still be freed
  bool incomplete = false;    // the live table overflowed: some allocations are missing
  // Sites sorted by site_before, each site's invariant, totals equal to the sums over sites.
  bool is_valid() const;
};

leak_report build_leak_report(const gmem::trace::trace& trace, symbolizer& symbols,
                              const leak_filter& filter);

// A call site on one line: the innermost `depth` frames, "f at file:line  <  caller at ...".
// The innermost frame is often a shared helper (an allocator wrapper); its caller tells sites
// apart.
std::string site_summary(const std::vector<frame_info>& frames, std::size_t depth = 2);
// The same for a site; a site whose frames were all folded, or that has a Python note, says so.
std::string site_summary(const leak_site& site, std::size_t depth = 2);

} // namespace gmem::tools
