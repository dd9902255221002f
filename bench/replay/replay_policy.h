// An allocator policy the replay tool can drive without a GPU: address arithmetic only, with
// a simulated upstream that counts the bytes it has handed out ("reserved").
#pragma once

#include "bench/replay/alloc_trace.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gmem_bench {

class replay_policy {
public:
  virtual ~replay_policy() = default;
  virtual std::string name() const = 0;
  // false = the policy could not serve the request (counted as a failure; the replay goes on).
  virtual bool allocate(std::uint32_t id, std::size_t bytes, std::uint64_t stream) = 0;
  virtual void deallocate(std::uint32_t id) = 0;
  virtual std::size_t reserved_bytes() const = 0;    // obtained from the simulated driver now
  virtual std::string details() const { return {}; } // counters worth printing after a replay
  virtual bool is_valid() const { return true; }     // the policy's invariant walker, if any
};

struct replay_result {
  std::string policy;
  std::size_t events = 0;
  std::size_t failures = 0;
  std::size_t peak_live_bytes = 0;     // highest sum of live requested bytes
  std::size_t peak_reserved_bytes = 0; // highest reserved_bytes() seen after any event
  std::size_t final_reserved_bytes = 0;
  double ns_per_event = 0;       // host time of the policy, per event
  std::size_t invalid_after = 0; // check: 1-based event after which is_valid() first failed
  double ratio() const {
    return peak_live_bytes ? double(peak_reserved_bytes) / double(peak_live_bytes) : 0.0;
  }
};

// check: is_valid() after every event (slow; the timing then means nothing).
replay_result replay(const alloc_trace& trace, replay_policy& policy, bool check = false);

// Policies by name: "gmem" (pool/pool.h when built with it; stream-less frees, as mode c
// sends them), "gmem-stream" (the same pool, frees on stream 0), "gmem-arena" (the pool with
// pool_options::arena, pages of 16 MiB or arena_page_bytes), "gmem-stitch" (the arena with
// pool_options::stitch, pages of 2 MiB or arena_page_bytes; its details() count the VMM calls
// the shim would make), "-stream" forms of the last two, "torch-like", "pow2-bins",
// "exact" (every request its own upstream allocation rounded to 2 MiB pages, like cudaMalloc
// of large blocks; a floor for "no caching"). Unknown names give nullptr.
std::unique_ptr<replay_policy> make_policy(const std::string& name);
// Sets a pool_options field (grow_slack, max_cached_bytes, large_segment_bytes, oversize_bytes,
// small_segment_bytes, small_max_bytes, oversize_fraction, oversize_max_waste,
// large_segment_max_bytes, reuse_safety, grow_window_allocs, fence_batch, stitch,
// stitch_keep_ranges, stitch_keep_bytes, stitch_time_share) or the arena's page size
// (arena_page_bytes, a power of two) for the gmem policies made after the call. false: unknown
// name, bad number (the counts grow_window_allocs, fence_batch and stitch_keep_ranges take
// whole numbers; stitch_time_share is not negative),
// or built without the pool.
bool set_gmem_pool_option(const std::string& name, const std::string& value);
std::vector<std::string> policy_names();

} // namespace gmem_bench
