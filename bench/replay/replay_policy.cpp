#include "bench/replay/replay_policy.h"

#include "bench/replay/simple_policies.h"
#include "bench/replay/torch_like_policy.h"

#include <algorithm>
#include <chrono>

namespace gmem_bench {

#ifdef GMEM_BENCH_WITH_POOL
// gmem_policy.cpp; arena: pool_options::arena over arena pages
std::unique_ptr<replay_policy> make_gmem_policy(bool stream_frees, bool arena, bool stitch = false);
#endif

replay_result replay(const alloc_trace& trace, replay_policy& policy, bool check) {
  replay_result r;
  r.policy = policy.name();
  r.events = trace.events.size();
  std::vector<std::size_t> sizes(trace.allocations, 0);
  std::vector<bool> served(trace.allocations, false);
  std::size_t live = 0, at = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (const trace_event& e : trace.events) {
    if (e.is_alloc) {
      sizes[e.id] = e.bytes;
      served[e.id] = policy.allocate(e.id, e.bytes, e.stream);
      if (!served[e.id]) {
        ++r.failures;
        continue;
      }
      live += e.bytes;
      r.peak_live_bytes = std::max(r.peak_live_bytes, live);
      r.peak_reserved_bytes = std::max(r.peak_reserved_bytes, policy.reserved_bytes());
    } else if (served[e.id]) {
      policy.deallocate(e.id);
      served[e.id] = false;
      live -= sizes[e.id];
    }
    ++at;
    if (check && r.invalid_after == 0 && !policy.is_valid()) r.invalid_after = at;
  }
  const auto t1 = std::chrono::steady_clock::now();
  r.final_reserved_bytes = policy.reserved_bytes();
  r.peak_reserved_bytes = std::max(r.peak_reserved_bytes, r.final_reserved_bytes);
  if (r.events)
    r.ns_per_event = double(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()) /
                     double(r.events);
  return r;
}

#ifndef GMEM_BENCH_WITH_POOL
bool set_gmem_pool_option(const std::string&, const std::string&) {
  return false;
}
#endif

std::vector<std::string> policy_names() {
  std::vector<std::string> v;
#ifdef GMEM_BENCH_WITH_POOL
  v.push_back("gmem");
  v.push_back("gmem-stream");
  v.push_back("gmem-arena");
  v.push_back("gmem-arena-stream");
  v.push_back("gmem-stitch");
  v.push_back("gmem-stitch-stream");
#endif
  v.insert(v.end(), {"torch-like", "pow2-bins", "exact"});
  return v;
}

std::unique_ptr<replay_policy> make_policy(const std::string& name) {
#ifdef GMEM_BENCH_WITH_POOL
  if (name == "gmem") return make_gmem_policy(false, false);
  if (name == "gmem-stream") return make_gmem_policy(true, false);
  if (name == "gmem-arena") return make_gmem_policy(false, true);
  if (name == "gmem-arena-stream") return make_gmem_policy(true, true);
  if (name == "gmem-stitch") return make_gmem_policy(false, true, true);
  if (name == "gmem-stitch-stream") return make_gmem_policy(true, true, true);
#endif
  if (name == "torch-like") return std::make_unique<torch_like_policy>();
  if (name == "pow2-bins") return std::make_unique<pow2_bins_policy>();
  if (name == "exact") return std::make_unique<exact_policy>();
  return nullptr;
}

} // namespace gmem_bench
