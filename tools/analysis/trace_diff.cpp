#include "tools/analysis/trace_diff.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <utility>

#include "tools/analysis/trace_facts.h"

namespace gmem::tools {
namespace {

constexpr std::uint64_t k_same_time_ns = 50'000'000;

} // namespace

bool trace_diff::is_valid() const {
  site_diff sum;
  auto balanced = [](const site_diff& d) {
    return d.b_bytes + d.freed_bytes == d.a_bytes + d.added_bytes &&
           d.b_count + d.freed_count == d.a_count + d.added_count;
  };
  for (std::size_t i = 0; i < sites.size(); ++i) {
    const auto& d = sites[i];
    if (!balanced(d)) return false;
    if (i > 0 && sites[i - 1].net_bytes() < d.net_bytes()) return false;
    sum.a_bytes += d.a_bytes;
    sum.a_count += d.a_count;
    sum.b_bytes += d.b_bytes;
    sum.b_count += d.b_count;
    sum.added_bytes += d.added_bytes;
    sum.added_count += d.added_count;
    sum.freed_bytes += d.freed_bytes;
    sum.freed_count += d.freed_count;
  }
  return balanced(total) && sum.a_bytes == total.a_bytes && sum.b_bytes == total.b_bytes &&
         sum.added_bytes == total.added_bytes && sum.freed_bytes == total.freed_bytes &&
         sum.a_count == total.a_count && sum.b_count == total.b_count;
}

trace_diff build_trace_diff(const gmem::trace::trace& a, site_resolver& a_sites,
                            const gmem::trace::trace& b, site_resolver& b_sites) {
  trace_diff d;
  d.same_process = a.info.pid == b.info.pid && a.info.proc_start_ticks == b.info.proc_start_ticks;
  d.a_now_ns = trace_now_ns(a);
  d.b_now_ns = trace_now_ns(b);
  // Allocation times are converted from CPU ticks with a calibration the writer refines as it
  // runs, so one allocation's time differs slightly between two snapshots: it is the same one
  // when address, stack and size are equal and the times are within k_same_time_ns or 2%
  // (measured: several ms apart on a loaded 2-core machine). A block freed and reallocated at
  // the same address, site and size within that time counts as kept: net stays exact.
  struct ident {
    std::uint64_t time_ns;
    std::uint32_t stack_id;
    std::uint64_t requested;
  };
  std::unordered_map<std::uintptr_t, ident> in_a, in_b;
  if (d.same_process) {
    for (const auto& x : a.live)
      in_a[x.address] = {x.time_ns, x.stack_id, x.requested};
    for (const auto& x : b.live)
      in_b[x.address] = {x.time_ns, x.stack_id, x.requested};
  }
  auto found = [](const std::unordered_map<std::uintptr_t, ident>& in,
                  const gmem::trace::live_allocation& x) {
    const auto it = in.find(x.address);
    if (it == in.end() || it->second.stack_id != x.stack_id || it->second.requested != x.requested)
      return false;
    const std::uint64_t t = it->second.time_ns;
    const std::uint64_t dt = t > x.time_ns ? t - x.time_ns : x.time_ns - t;
    return dt <= std::max<std::uint64_t>(k_same_time_ns, x.time_ns / 50);
  };
  std::map<std::string, site_diff> by_key;
  for (const auto& x : a.live) {
    const call_site& s = a_sites.site(a_sites.site_of(a, x.stack_id, x.kind));
    site_diff& e = by_key[s.key];
    if (e.site.key.empty() && e.site.id.empty()) e.site = s;
    e.a_bytes += x.requested;
    ++e.a_count;
    if (!found(in_b, x)) {
      e.freed_bytes += x.requested;
      ++e.freed_count;
    }
  }
  for (const auto& x : b.live) {
    const call_site& s = b_sites.site(b_sites.site_of(b, x.stack_id, x.kind));
    site_diff& e = by_key[s.key];
    e.site = s; // B's names win: it is the newer trace
    e.b_bytes += x.requested;
    ++e.b_count;
    if (!found(in_a, x)) {
      e.added_bytes += x.requested;
      ++e.added_count;
    }
  }
  for (auto& [key, e] : by_key) {
    d.total.a_bytes += e.a_bytes;
    d.total.a_count += e.a_count;
    d.total.b_bytes += e.b_bytes;
    d.total.b_count += e.b_count;
    d.total.added_bytes += e.added_bytes;
    d.total.added_count += e.added_count;
    d.total.freed_bytes += e.freed_bytes;
    d.total.freed_count += e.freed_count;
    d.sites.push_back(std::move(e));
  }
  std::sort(d.sites.begin(), d.sites.end(), [](const site_diff& x, const site_diff& y) {
    if (x.net_bytes() != y.net_bytes()) return x.net_bytes() > y.net_bytes();
    if (x.added_bytes != y.added_bytes) return x.added_bytes > y.added_bytes;
    return x.site.id < y.site.id;
  });
  return d;
}

} // namespace gmem::tools
