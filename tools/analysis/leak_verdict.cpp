#include "tools/analysis/leak_verdict.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_map>

#include "common/units.h"
#include "tools/analysis/trace_facts.h"

namespace gmem::tools {
namespace {

using gmem::trace::event_type;

// The run's allocation clock: how many allocations the program had made by a time. Allocations
// the ring lapped are estimated (the ring's share of allocations among its events, spread
// evenly over the lapped time); without events the clock is the trace's time.
class alloc_clock {
public:
  alloc_clock(const gmem::trace::trace& t, std::uint64_t now) : now_(now) {
    for (const auto& e : t.events)
      if (e.type == event_type::alloc) times_.push_back(e.time_ns);
    std::sort(times_.begin(), times_.end());
    lapped_ns_ = t.losses.history_from_ns;
    if (lapped_ns_ > 0 && !t.events.empty())
      lost_ = static_cast<std::uint64_t>(static_cast<double>(t.losses.lost_events) *
                                         static_cast<double>(times_.size()) /
                                         static_cast<double>(t.events.size()));
  }
  bool wall() const { return times_.empty(); }
  std::uint64_t at(std::uint64_t time_ns) const {
    if (wall()) return time_ns;
    if (time_ns < lapped_ns_)
      return static_cast<std::uint64_t>(static_cast<double>(lost_) * static_cast<double>(time_ns) /
                                        static_cast<double>(lapped_ns_));
    return lost_ + static_cast<std::uint64_t>(
                       std::upper_bound(times_.begin(), times_.end(), time_ns) - times_.begin());
  }
  std::uint64_t end() const { return wall() ? now_ : lost_ + times_.size(); }

private:
  std::uint64_t now_;
  std::vector<std::uint64_t> times_; // of the ring's allocations, sorted
  std::uint64_t lapped_ns_ = 0;      // the ring's history starts here (0: complete)
  std::uint64_t lost_ = 0;           // allocations estimated before it
};

} // namespace

const char* to_string(leak_verdict v) noexcept {
  switch (v) {
  case leak_verdict::leak:
    return "leak";
  case leak_verdict::held:
    return "held";
  case leak_verdict::framework_cache:
    return "framework_cache";
  case leak_verdict::suppressed:
    return "suppressed";
  }
  return "?";
}

bool is_growing(const site_trend& tr) {
  const std::uint64_t need = std::max<std::uint64_t>(k_leak_min_rise, tr.live_count / 8);
  return tr.slices >= k_leak_min_slices && tr.early_slices >= 1 &&
         tr.rise_count >= static_cast<std::int64_t>(need) && tr.rise_bytes > 0;
}

std::vector<site_trend>
site_trends(const gmem::trace::trace& t,
            const std::function<std::size_t(std::uint32_t, gmem::trace::alloc_kind)>& site_of,
            std::size_t site_count, std::uint64_t window_ns) {
  std::vector<site_trend> out(site_count);
  const std::uint64_t now = trace_now_ns(t);
  const alloc_clock clock(t, now);
  const std::uint64_t end = clock.end(), mid = end / 2;
  const std::uint64_t window = std::min(window_ns, now);
  const std::uint64_t from = now - window;
  // Every event is there from `covered` on; before it the ring may have lost some.
  const std::uint64_t covered = clock.wall() ? now + 1 : t.losses.history_from_ns;
  // Live count and bytes of each site as the ring is replayed, and the most of each in the
  // first half; survivors made before the ring's history start it off.
  std::vector<std::uint64_t> live(site_count), bytes(site_count), max_live(site_count),
      max_bytes(site_count);
  std::vector<std::uint32_t> slice_bits(site_count);
  std::set<std::pair<std::uintptr_t, std::uint64_t>> held; // (live key, time) of held survivors
  for (const auto& a : t.live) {
    const std::size_t s = site_of(a.stack_id, a.kind);
    if (s >= site_count) continue;
    site_trend& tr = out[s];
    ++tr.live_count;
    tr.live_bytes += a.requested;
    const std::uint64_t c = clock.at(a.time_ns);
    const std::uint64_t slice =
        end == 0 ? 0 : std::min<std::uint64_t>(k_trend_slices - 1, c * k_trend_slices / end);
    slice_bits[s] |= 1u << static_cast<unsigned>(slice);
    if (a.time_ns >= from) tr.window_growth_bytes += static_cast<std::int64_t>(a.requested);
    if (a.time_ns < covered) {
      ++live[s];
      bytes[s] += a.requested;
      if (c <= mid) ++max_live[s], max_bytes[s] += a.requested; // live at the middle, at least
    }
    if (a.held) held.insert({gmem::trace::live_key(a.address, a.kind), a.time_ns});
  }
  struct origin {
    std::size_t site;
    std::uint64_t time_ns;
    std::uint64_t requested;
  };
  std::unordered_map<std::uintptr_t, origin> open;
  std::uint64_t allocs = clock.at(covered > 0 ? covered - 1 : 0);
  for (const auto& e : t.events) {
    if (e.time_ns < covered) continue;
    const std::uintptr_t key = gmem::trace::live_key(e.address, e.kind);
    if (e.type == event_type::alloc) {
      ++allocs;
      const std::size_t s = site_of(e.stack_id, e.kind);
      if (s >= site_count) {
        open.erase(key);
        continue;
      }
      open[key] = {s, e.time_ns, e.size};
      ++live[s];
      bytes[s] += e.size;
      if (allocs <= mid) {
        max_live[s] = std::max(max_live[s], live[s]);
        max_bytes[s] = std::max(max_bytes[s], bytes[s]);
      }
    } else if (e.type == event_type::free) {
      auto it = open.find(key);
      if (it == open.end()) continue;
      const origin o = it->second;
      open.erase(it);
      // A survivor the interpreter's shutdown freed is still outstanding for the verdict.
      if (held.count({key, o.time_ns}) != 0) continue;
      --live[o.site];
      bytes[o.site] -= std::min(bytes[o.site], o.requested);
      if (o.time_ns < from && e.time_ns >= from)
        out[o.site].window_growth_bytes -= static_cast<std::int64_t>(o.requested);
    }
  }
  for (std::size_t s = 0; s < site_count; ++s) {
    site_trend& tr = out[s];
    if (tr.live_count == 0) continue;
    for (std::uint32_t bits = slice_bits[s]; bits != 0; bits &= bits - 1)
      ++tr.slices;
    for (std::uint32_t bits = slice_bits[s] & ((1u << k_trend_slices / 2) - 1); bits != 0;
         bits &= bits - 1)
      ++tr.early_slices;
    tr.rise_count =
        static_cast<std::int64_t>(tr.live_count) - static_cast<std::int64_t>(max_live[s]);
    tr.rise_bytes =
        static_cast<std::int64_t>(tr.live_bytes) - static_cast<std::int64_t>(max_bytes[s]);
    tr.window_ns = window;
    tr.growing = is_growing(tr);
  }
  return out;
}

bool native_program_ended(const gmem::trace::trace& t) {
  // A saved copy of a running process is not an end: the program may free it yet.
  return t.info.state != gmem::trace::trace_state::running && t.python_stacks.empty();
}

leak_verdict verdict_of(const site_trend& tr, bool native_ended) {
  return tr.growing || native_ended ? leak_verdict::leak : leak_verdict::held;
}

std::string growth_rate_text(const site_trend& tr) {
  if (tr.window_growth_bytes <= 0 || tr.window_ns == 0) return {};
  const double per_min =
      static_cast<double>(tr.window_growth_bytes) * 60e9 / static_cast<double>(tr.window_ns);
  return "+" + format_bytes(static_cast<std::uint64_t>(per_min)) + "/min over the last " +
         format_duration_ns(tr.window_ns);
}

} // namespace gmem::tools
