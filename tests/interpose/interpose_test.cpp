// libgmem.so end to end, without a GPU: shim_probe (tests/interpose/shim_probe.cpp) runs under
// LD_PRELOAD=libgmem.so against the fake libcuda.so.1 and reports what it saw; the fake's
// counters show what reached the "driver". Every route into the driver API is exercised
// (docs/design.md, "Interception"); the trace is off (GMEM_TRACE=0) except where noted.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <unistd.h>

#include "pool/pool.h"
#include "tests/interpose/child_process.h"

namespace {

using env_list = std::vector<std::pair<std::string, std::string>>;

struct probe_run {
  gmem::test::child_result child;
  std::map<std::string, std::uint64_t> counters; // the fake's, "counter NAME=VALUE"
  bool has(const std::string& text) const { return child.output.find(text) != std::string::npos; }
  // A counter of the first pool of `kind` ("device", "host") in the GMEM_VERBOSE report.
  std::uint64_t pool_stat(const std::string& kind, const std::string& name) const {
    const auto line = child.output.find("kind=" + kind + " ");
    if (line == std::string::npos) return ~std::uint64_t{0};
    const auto end = child.output.find('\n', line);
    const auto at = child.output.find(" " + name + "=", line);
    if (at == std::string::npos || at > end) return ~std::uint64_t{0};
    return std::stoull(child.output.substr(at + name.size() + 2));
  }
  // NAME=VALUE on the first output line that starts with `line` ("gmem: vmm ", "arena_trim ").
  std::uint64_t value(const std::string& line, const std::string& name) const {
    std::size_t at = child.output.rfind(line, 0) == 0 ? 0 : child.output.find("\n" + line);
    if (at == std::string::npos) return ~std::uint64_t{0};
    const auto end = child.output.find('\n', at + 1);
    at = child.output.find(" " + name + "=", at);
    if (at == std::string::npos || at > end) return ~std::uint64_t{0};
    return std::stoull(child.output.substr(at + name.size() + 2));
  }
  std::uint64_t counter(const std::string& name) const {
    auto it = counters.find(name);
    return it == counters.end() ? ~std::uint64_t{0} : it->second;
  }
};

probe_run run_probe(const std::string& route, const std::string& scenario, env_list env = {},
                    bool preload = true) {
  const std::string dir = gmem::test::self_dir();
  env_list full = {
      {"LD_LIBRARY_PATH", dir + "/fake_cuda"}, {"GMEM_TRACE", "0"}, {"GMEM_VERBOSE", "1"}};
  if (preload) full.push_back({"LD_PRELOAD", dir + "/../lib/libgmem.so"});
  full.insert(full.end(), env.begin(), env.end());
  const std::string probe =
      dir + (route == "exported" ? "/interpose/shim_probe_linked" : "/interpose/shim_probe");
  probe_run r;
  r.child = gmem::test::run_child({probe, route, scenario}, full);
  std::istringstream lines(r.child.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("counter ", 0) != 0) continue;
    const auto eq = line.find('=');
    r.counters[line.substr(8, eq - 8)] = std::stoull(line.substr(eq + 1));
  }
  return r;
}

#define EXPECT_PROBE_OK(r) EXPECT_EQ((r).child.exit_code, 0) << (r).child.output

const std::size_t k_segment = gmem::pool_options{}.small_segment_bytes;

class route_test : public testing::TestWithParam<const char*> {};

TEST_P(route_test, allocations_come_from_segments) {
  // Without the arena and GMEM_VMM, segments are cuMemAlloc_v2 calls, which the fake sizes.
  const probe_run r = run_probe(GetParam(), "basic", {{"GMEM_ARENA", "0"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("kind=device live_bytes=0")) << r.child.output;
  EXPECT_TRUE(r.has("total_allocs=200 total_frees=200")) << r.child.output;
  EXPECT_LT(r.counter("mem_alloc_calls"), 20u);
  EXPECT_GE(r.counter("smallest_alloc"), k_segment); // the fake saw segments only
  EXPECT_EQ(r.counter("vmm_creates"), 0u);
}

TEST_P(route_test, segments_are_virtual_memory_mappings_with_gmem_vmm) {
  const probe_run r = run_probe(GetParam(), "basic", {{"GMEM_VMM", "1"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("total_allocs=200 total_frees=200")) << r.child.output;
  EXPECT_EQ(r.counter("mem_alloc_calls"), 0u);
  EXPECT_GT(r.counter("vmm_creates"), 0u);
  EXPECT_LT(r.counter("vmm_creates"), 20u);
  EXPECT_EQ(r.counter("vmm_maps"), r.counter("vmm_creates"));
}

// A virtual-memory segment given back while a kernel still writes into it is retired, not
// torn down (the fake's cuMemUnmap leaves the range inaccessible: the probe would crash), the
// host never waits for it, and its physical memory serves the next segment at once, ordered
// after the old kernel.
TEST_P(route_test, vmm_segments_retire_without_blocking_the_host) {
  const probe_run r = run_probe(GetParam(), "vmm_retire",
                                {{"GMEM_VMM", "1"}, {"GMEM_ARENA", "0"}, {"GMEM_MAX_CACHED", "1"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("vmm_retire host_syncs=0 creates_at_once=0 corrupted=0 unmaps_at_once=0 "
                    "unmaps_later=2"))
      << r.child.output;
}

TEST_P(route_test, driver_errors_are_kept) {
  EXPECT_PROBE_OK(run_probe(GetParam(), "errors"));
}

TEST_P(route_test, range_queries_describe_the_block) {
  EXPECT_PROBE_OK(run_probe(GetParam(), "range"));
}

TEST_P(route_test, async_allocations_without_a_current_context_are_pooled) {
  const probe_run r = run_probe(GetParam(), "async_no_context");
  EXPECT_PROBE_OK(r);
  EXPECT_EQ(r.counter("async_alloc_calls"), 0u) << r.child.output;
  EXPECT_TRUE(r.has("total_allocs=100 total_frees=100")) << r.child.output;
}

TEST_P(route_test, async_allocations_are_pooled) {
  const probe_run r = run_probe(GetParam(), "async");
  EXPECT_PROBE_OK(r);
  EXPECT_EQ(r.counter("async_alloc_calls"), 0u);
  EXPECT_TRUE(r.has("total_allocs=150 total_frees=150")) << r.child.output;
}

TEST_P(route_test, pinned_host_allocations_are_pooled) {
  const probe_run r = run_probe(GetParam(), "host");
  EXPECT_PROBE_OK(r);
  EXPECT_LE(r.counter("host_alloc_calls"), 2u);
  EXPECT_TRUE(r.has("kind=host")) << r.child.output;
}

TEST_P(route_test, reuse_is_safe_for_stream_less_frees) {
  const probe_run r = run_probe(GetParam(), "hazard");
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("corrupted=0")) << r.child.output;
}

TEST_P(route_test, reuse_is_safe_for_stream_ordered_frees) {
  const probe_run r = run_probe(GetParam(), "hazard_async");
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("corrupted=0")) << r.child.output;
}

TEST_P(route_test, hazard_test_fails_without_reuse_safety) {
  for (const char* scenario : {"hazard", "hazard_async"}) {
    const probe_run r = run_probe(GetParam(), scenario, {{"GMEM_REUSE_SAFETY", "0"}});
    EXPECT_EQ(r.child.exit_code, 3) << scenario << ": " << r.child.output;
    EXPECT_TRUE(r.has("reused=1 corrupted=1")) << r.child.output;
  }
}

// Eight threads on streams of their own, kernels in flight, blocks moving between streams under
// a tight limit (seals, waits, barriers, fences): no check kernel ever sees another op's bytes;
// without reuse safety it does (so the test can fail).
TEST_P(route_test, reuse_is_safe_across_threads_and_streams) {
  const probe_run r = run_probe(GetParam(), "hazard_threads", {{"GMEM_LIMIT", "64M"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("hazard_threads corrupted=0")) << r.child.output;
  EXPECT_GT(r.pool_stat("device", "total_allocs"), 2000u) << r.child.output;
  // Blocks did move between streams: through dependencies on sealed events, and barriers.
  EXPECT_GT(r.counter("stream_waits"), 0u) << r.child.output;
  EXPECT_GT(r.pool_stat("device", "barriers"), 0u) << r.child.output;
  // GMEM_VERBOSE counts the pool's own event calls (barriers make more waits of their own).
  EXPECT_GT(r.value("gmem: events ", "records"), 0u) << r.child.output;
  EXPECT_GT(r.value("gmem: events ", "waits"), 0u) << r.child.output;
  EXPECT_LE(r.value("gmem: events ", "waits"), r.counter("stream_waits")) << r.child.output;
  // The threads contend for fences, so marks (cuCtxRecordEvent alone; on the fake driver
  // complete once every stream has passed it) were recorded and stood in for barriers.
  const std::uint64_t marks = r.value("gmem: slow_path ", "marks");
  EXPECT_NE(marks, ~std::uint64_t{0}) << r.child.output;
  EXPECT_GT(marks, 0u) << r.child.output;
}

// The same eight threads while a graph capture stays open on another stream: the pool makes
// no fence and records no mark (either would invalidate the capture; the fake driver does as
// the real one), though it asks for marks; the capture ends, and blocks are still never early.
// Each capture query of the fake sleeps 50 us, so the fences (which check every stream for a
// capture) take long enough for the threads to meet in them and turn marks on.
TEST(shim, marks_wait_while_a_capture_is_open) {
  const probe_run r =
      run_probe("dlsym", "hazard_threads_capture", {{"FAKE_CUDA_CAPTURE_QUERY_US", "50"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("hazard_threads capture_ended=1")) << r.child.output;
  EXPECT_TRUE(r.has("hazard_threads corrupted=0")) << r.child.output;
  EXPECT_EQ(r.value("gmem: slow_path ", "marks"), 0u) << r.child.output;
  const std::uint64_t refused = r.value("gmem: slow_path ", "marks_refused");
  EXPECT_NE(refused, ~std::uint64_t{0}) << r.child.output;
  EXPECT_GT(refused, 0u) << r.child.output;
  EXPECT_EQ(r.pool_stat("device", "barriers"), 0u) << r.child.output;
}

// The same without reuse safety: check kernels see other ops' bytes (tens of them a run), so
// the test above can fail.
TEST(shim, capture_hazard_test_fails_without_reuse_safety) {
  const probe_run r = run_probe("dlsym", "hazard_threads_capture",
                                {{"FAKE_CUDA_CAPTURE_QUERY_US", "50"}, {"GMEM_REUSE_SAFETY", "0"}});
  EXPECT_EQ(r.child.exit_code, 3) << r.child.output;
  EXPECT_TRUE(r.has("hazard_threads capture_ended=1")) << r.child.output;
  EXPECT_FALSE(r.has("hazard_threads corrupted=0")) << r.child.output;
}

// GMEM_FENCE_MARKS=0: every fence is a barrier, contended or not.
TEST(shim, fence_marks_can_be_turned_off) {
  const probe_run r =
      run_probe("dlsym", "hazard_threads", {{"GMEM_LIMIT", "64M"}, {"GMEM_FENCE_MARKS", "0"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("hazard_threads corrupted=0")) << r.child.output;
  EXPECT_EQ(r.value("gmem: slow_path ", "marks"), 0u) << r.child.output;
  EXPECT_GT(r.pool_stat("device", "barriers"), 0u) << r.child.output;
}

TEST(shim, thread_hazard_test_fails_without_reuse_safety) {
  const probe_run r =
      run_probe("dlsym", "hazard_threads", {{"GMEM_LIMIT", "64M"}, {"GMEM_REUSE_SAFETY", "0"}});
  EXPECT_EQ(r.child.exit_code, 3) << r.child.output;
  EXPECT_FALSE(r.has("hazard_threads corrupted=0")) << r.child.output;
}

TEST_P(route_test, eight_threads) {
  const probe_run r = run_probe(GetParam(), "stress");
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("kind=device live_bytes=0")) << r.child.output;
}

TEST_P(route_test, limit_gives_out_of_memory_and_recovers) {
  EXPECT_PROBE_OK(run_probe(GetParam(), "limit", {{"GMEM_LIMIT", "64M"}}));
}

// Only the allocation made while the capture was open reaches the driver; the shim asked the
// driver about capture only then (two hooks), not for the pooled pair after the end. The same
// through the CUDA 10.0 form, cuStreamBeginCapture(stream), which the CUDA 13 runtime looks up
// (cuGetProcAddress at version 10000; the runtime route does too): hooked like the others, so
// the capture is counted and tracking stays on (untracked, every stream-ordered hook and every
// barrier would ask the driver about capture).
TEST_P(route_test, capturing_streams_pass_through) {
  for (const char* scenario : {"capture", "capture_10000"}) {
    const probe_run r = run_probe(GetParam(), scenario);
    EXPECT_PROBE_OK(r);
    EXPECT_EQ(r.counter("async_alloc_calls"), 1u) << scenario;
    EXPECT_EQ(r.counter("smallest_alloc"), 12345u) << scenario;
    EXPECT_EQ(r.counter("async_free_calls"), 1u) << scenario;
    EXPECT_EQ(r.counter("capture_queries"), 2u) << scenario;
    EXPECT_TRUE(r.has("gmem: captures open=0 tracked=1")) << scenario << r.child.output;
  }
}

// Without any capture, stream-ordered hooks never ask the driver whether the stream captures.
TEST_P(route_test, no_capture_query_while_no_capture_is_open) {
  const probe_run r = run_probe(GetParam(), "async");
  EXPECT_PROBE_OK(r);
  EXPECT_GT(r.pool_stat("device", "total_allocs"), 0u);
  EXPECT_EQ(r.counter("capture_queries"), 0u);
  EXPECT_TRUE(r.has("gmem: captures open=0 tracked=1")) << r.child.output;
}

TEST_P(route_test, context_teardown_drops_the_pool) {
  EXPECT_PROBE_OK(run_probe(GetParam(), "contexts"));
}

TEST_P(route_test, forked_child_stands_aside) {
  const probe_run r = run_probe(GetParam(), "fork");
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("child ok=1 direct=1")) << r.child.output;
}

TEST_P(route_test, exit_while_threads_allocate) {
  for (int i = 0; i < 3; ++i) {
    const probe_run r = run_probe(GetParam(), "exit_threads");
    EXPECT_EQ(r.child.signal, 0) << r.child.output;
    EXPECT_PROBE_OK(r);
    EXPECT_TRUE(r.has("exiting after")) << r.child.output;
    EXPECT_FALSE(r.has("late free failed")) << r.child.output;
  }
}

// Physical memory given back while the GPU is behind is bounded: past the budget the host
// waits for the oldest retired segment's event, never for the whole device.
TEST_P(route_test, vmm_spare_memory_is_bounded_by_waiting_for_events) {
  const probe_run r =
      run_probe(GetParam(), "vmm_budget", {{"GMEM_VMM", "1"}, {"GMEM_MAX_CACHED", "1"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("vmm_budget host_syncs=0 unmaps_at_once=")) << r.child.output;
  EXPECT_FALSE(r.has("vmm_budget host_syncs=0 unmaps_at_once=0\n")) << r.child.output;
}

TEST_P(route_test, ipc_exports_every_block_of_a_segment) {
  // The block at the segment's start gets the driver's handle, the other a gmem handle.
  const probe_run r = run_probe(GetParam(), "ipc");
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("ipc a=0 b=0")) << r.child.output;
  EXPECT_FALSE(r.has("gmem: warning: cuIpcGetMemHandle")) << r.child.output;
}

TEST_P(route_test, destroyed_streams_blocks_wait_for_a_fence) {
  const probe_run r = run_probe(GetParam(), "stream_destroy");
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("stream_destroy synchronized=0")) << r.child.output;
  EXPECT_TRUE(r.has("stream_free_bytes=0")) << r.child.output;
  EXPECT_EQ(r.pool_stat("device", "pending_blocks"), 1u) << r.child.output;
}

// Streams created through this route are registered: a non-blocking stream created before the
// barrier is made to wait for it, one created after it waits at creation.
TEST_P(route_test, barrier_orders_streams_of_every_kind) {
  for (const char* scenario : {"barrier:nonblocking:later", "barrier:blocking:nonblocking"}) {
    const probe_run r = run_probe(GetParam(), scenario);
    EXPECT_PROBE_OK(r);
    EXPECT_TRUE(r.has("reused=1 host_syncs=0 corrupted=0")) << scenario << ": " << r.child.output;
    EXPECT_EQ(r.pool_stat("device", "barriers"), 1u) << r.child.output;
  }
}

// GMEM_ARENA=1 (interpose/upstream/vmm_upstream.h): requests above 1 MiB come from arena pages, one
// physical allocation each, mapped where the arena ends; small ones from ordinary segments
// (cuMemAlloc, or VMM mappings with GMEM_VMM=1). Every block keeps its bytes as the arena grows.
TEST_P(route_test, arena_serves_large_requests_from_pages) {
  for (const char* vmm : {"0", "1"}) {
    const probe_run r =
        run_probe(GetParam(), "arena_growth", {{"GMEM_ARENA", "1"}, {"GMEM_VMM", vmm}});
    EXPECT_PROBE_OK(r);
    EXPECT_TRUE(r.has("arena_growth corrupted=0 large_mem_allocs=0 ")) << r.child.output;
    const std::uint64_t pages = r.value("gmem: vmm ", "arena_pages_mapped");
    EXPECT_GT(pages, 0u) << r.child.output;
    EXPECT_LE(pages, r.counter("vmm_creates")) << r.child.output;
    EXPECT_GT(r.value("gmem: vmm ", "arena_extends"), 1u) << r.child.output; // it grew
    EXPECT_EQ(r.counter("vmm_maps"), r.counter("vmm_creates"));
    if (vmm[0] == '0') {
      EXPECT_GE(r.counter("mem_alloc_calls"), 1u); // the small block's segment
      EXPECT_EQ(r.value("gmem: vmm ", "maps"), 0u) << r.child.output;
    } else {
      EXPECT_EQ(r.counter("mem_alloc_calls"), 0u);
    }
  }
}

// GMEM_STRICT (interpose/strict_mode.h): a stream-less free waits for the device like the
// driver's (the fake's cuMemFree synchronizes: GMEM_ENABLE=0 is the reference), and an
// allocation orders streams. Without strict mode the pooled calls do neither.
TEST_P(route_test, strict_free_waits_for_the_device) {
  const probe_run native = run_probe(GetParam(), "strict_free", {{"GMEM_ENABLE", "0"}});
  EXPECT_PROBE_OK(native);
  EXPECT_TRUE(native.has("strict_free ok=1")) << native.child.output;
  const probe_run loose = run_probe(GetParam(), "strict_free");
  EXPECT_PROBE_OK(loose);
  EXPECT_TRUE(loose.has("strict_free ok=0")) << loose.child.output; // the documented hazard
  const probe_run strict = run_probe(GetParam(), "strict_free", {{"GMEM_STRICT", "1"}});
  EXPECT_PROBE_OK(strict);
  EXPECT_TRUE(strict.has("strict_free ok=1")) << strict.child.output;
  // Still pooled: one segment each for the device and the host pool, nothing freed upstream.
  EXPECT_EQ(strict.counter("mem_free_calls"), 0u) << strict.child.output;
  EXPECT_EQ(strict.pool_stat("device", "total_allocs"), 1u) << strict.child.output;
  EXPECT_GE(strict.pool_stat("device", "fences"), 1u) << strict.child.output;
}

TEST_P(route_test, strict_allocation_orders_streams) {
  for (const char* barriers : {"1", "0"}) {
    const probe_run strict =
        run_probe(GetParam(), "strict_alloc", {{"GMEM_STRICT", "1"}, {"GMEM_BARRIERS", barriers}});
    EXPECT_PROBE_OK(strict);
    EXPECT_TRUE(strict.has("strict_alloc ok=1")) << barriers << strict.child.output;
  }
  const probe_run loose = run_probe(GetParam(), "strict_alloc");
  EXPECT_PROBE_OK(loose);
  EXPECT_TRUE(loose.has("strict_alloc ok=0")) << loose.child.output;
}

INSTANTIATE_TEST_SUITE_P(routes, route_test,
                         testing::Values("exported", "dlsym", "runtime", "runtime_ptsz"));

// The device-side barrier (interpose/upstream/stream_registry.h): the old owner's slow write on
// stream X, a stream-less free, the same address allocated again with no cuCtxSynchronize, the new
// owner's write on stream Y: the new owner's value wins for every X and Y.
// Made both ways: the context barrier (the fake driver has cuCtxRecordEvent / cuCtxWaitEvent)
// and the fan-out over the registered streams (a driver older than CUDA 12.5 hides them).
const env_list k_context_barrier = {{"GMEM_VERBOSE", "1"}};
const env_list k_fan_out = {{"GMEM_VERBOSE", "1"}, {"FAKE_CUDA_DRIVER_VERSION", "12040"}};

TEST(barriers, every_pair_of_streams_is_ordered_without_a_host_sync) {
  for (const auto& [env, line] :
       {std::pair{k_context_barrier, "gmem: barriers made=1 context=1 streams_checked=0"},
        std::pair{k_fan_out, "gmem: barriers made=1 context=0 "}}) {
    for (const char* old_kind : {"legacy", "blocking", "nonblocking"}) {
      for (const char* new_kind : {"legacy", "blocking", "nonblocking", "later"}) {
        const std::string scenario = std::string("barrier:") + old_kind + ":" + new_kind;
        const probe_run r = run_probe("dlsym", scenario, env);
        EXPECT_PROBE_OK(r);
        EXPECT_TRUE(r.has("reused=1 host_syncs=0 corrupted=0"))
            << scenario << ": " << r.child.output;
        EXPECT_EQ(r.pool_stat("device", "barriers"), 1u) << scenario << ": " << r.child.output;
        EXPECT_TRUE(r.has(line)) << scenario << ": " << r.child.output;
      }
    }
  }
}

TEST(barriers, the_scenario_corrupts_without_reuse_safety) {
  const probe_run r =
      run_probe("dlsym", "barrier:nonblocking:nonblocking", {{"GMEM_REUSE_SAFETY", "0"}});
  EXPECT_EQ(r.child.exit_code, 3) << r.child.output;
  EXPECT_TRUE(r.has("reused=1 host_syncs=0 corrupted=1")) << r.child.output;
}

// GMEM_CONTEXT_BARRIER=0 (diagnosis): the fan-out, though the driver has the context barrier.
TEST(barriers, the_context_barrier_can_be_turned_off) {
  const probe_run r = run_probe("runtime", "barrier:nonblocking:later",
                                {{"GMEM_VERBOSE", "1"}, {"GMEM_CONTEXT_BARRIER", "0"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("reused=1 host_syncs=0 corrupted=0")) << r.child.output;
  EXPECT_TRUE(r.has("gmem: barriers made=1 context=0 ")) << r.child.output;
  EXPECT_EQ(r.counter("ctx_records"), 0u) << r.child.output;
}

// The scenarios above can fail: a context barrier that does nothing (the fake's record and wait
// succeed without effect) lets the new owner's write land first, for every kind of old stream.
TEST(barriers, a_context_barrier_that_does_nothing_is_caught) {
  for (const char* scenario : {"barrier:nonblocking:nonblocking", "barrier:legacy:later",
                               "barrier:blocking:nonblocking"}) {
    const probe_run r = run_probe("dlsym", scenario, {{"FAKE_CUDA_CONTEXT_BARRIER", "noop"}});
    EXPECT_EQ(r.child.exit_code, 3) << scenario << ": " << r.child.output;
    EXPECT_TRUE(r.has("corrupted=1")) << scenario << ": " << r.child.output;
  }
}

// A capture open on another thread, begun through each begin form on each route: the shim
// counted it, so no fence touched it: a context barrier or a context synchronization would
// invalidate it (the fake does, as the driver does, and cuStreamEndCapture then fails). The
// freed block stays pending, the allocation takes new memory, and the capture ends normally.
TEST_P(route_test, a_capture_open_on_another_thread_is_never_invalidated) {
  for (const char* form : {"v2", "10000", "to_graph"}) {
    const probe_run r =
        run_probe(GetParam(), std::string("barrier_capture_thread:") + form, k_context_barrier);
    EXPECT_PROBE_OK(r);
    EXPECT_TRUE(r.has("reused=0 host_syncs=0 capture_ended=1 corrupted=0"))
        << form << ": " << r.child.output;
    EXPECT_TRUE(r.has("gmem: barriers made=0 ")) << form << ": " << r.child.output;
    EXPECT_TRUE(r.has("gmem: captures open=0 tracked=1")) << form << ": " << r.child.output;
  }
}

// A capture the shim could not count: the context barrier meets it, the driver invalidates it
// (nothing can undo that), and from then on the shim trusts no count: it asks the driver, which
// reports the stream capturing, so no fence is made; the next one, after the capture ended,
// fans out; GMEM_VERBOSE and a warning say why.
TEST(barriers, a_capture_the_count_missed_turns_the_context_barrier_off) {
  const probe_run r = run_probe("runtime", "barrier_capture_unseen", k_context_barrier);
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("barrier_capture_unseen reused=0,1 host_syncs=0,0 corrupted=0"))
      << r.child.output;
  EXPECT_TRUE(r.has("gmem: warning: a graph capture that gmem did not see")) << r.child.output;
  EXPECT_TRUE(r.has("tracked=0 untracked_by=a capture seen by cuCtxRecordEvent")) << r.child.output;
  // Every barrier made (the second fence's, and the arena's retirement events) fanned out.
  EXPECT_GE(r.value("gmem: barriers ", "made"), 1u) << r.child.output;
  EXPECT_EQ(r.value("gmem: barriers ", "context"), 0u) << r.child.output;
}

TEST(barriers, off_means_the_pool_synchronizes) {
  const probe_run r = run_probe("runtime", "barrier:nonblocking:later", {{"GMEM_BARRIERS", "0"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("reused=1 host_syncs=1 corrupted=0")) << r.child.output;
  EXPECT_EQ(r.pool_stat("device", "barriers"), 0u) << r.child.output;
}

// The capture ends normally (the probe checks cuStreamEndCapture's result).
TEST(barriers, a_capturing_stream_gets_no_event_and_no_fence) {
  for (const char* kind : {"nonblocking", "legacy"}) {
    const probe_run r = run_probe("runtime", std::string("barrier_capture:") + kind);
    EXPECT_PROBE_OK(r);
    EXPECT_TRUE(r.has("reused=0 host_syncs=0 capture_records=0 corrupted=0"))
        << kind << ": " << r.child.output;
    EXPECT_EQ(r.pool_stat("device", "barriers"), 0u) << kind << ": " << r.child.output;
  }
}

// cuStreamBeginCapture goes through the shim on every route (it waits for a barrier in
// progress) and still begins the capture.
TEST_P(route_test, capture_begun_through_the_driver_stops_barriers) {
  const probe_run r = run_probe(GetParam(), "barrier_capture:begin");
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("reused=0 host_syncs=0 capture_records=0 corrupted=0")) << r.child.output;
  EXPECT_EQ(r.pool_stat("device", "barriers"), 0u) << r.child.output;
}

TEST(barriers, a_destroyed_stream_leaves_the_registry) {
  const probe_run r = run_probe("runtime", "barrier_destroyed");
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("reused=1 host_syncs=0 corrupted=0")) << r.child.output;
  EXPECT_EQ(r.pool_stat("device", "barriers"), 1u) << r.child.output;
}

// A barrier made while the last one's hub is incomplete takes the streams waiting for that
// hub as busy without asking (interpose/upstream/stream_registry.cpp): work queued on them after
// the wait is still ordered before the new owner's.
TEST(barriers, a_barrier_behind_an_incomplete_hub_orders_what_its_streams_queued_since) {
  const probe_run r = run_probe("runtime", "barrier_chain", k_fan_out);
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("barrier_chain reused=1 host_syncs=0 corrupted=0")) << r.child.output;
  EXPECT_EQ(r.pool_stat("device", "barriers"), 2u) << r.child.output;
  // The second barrier: X and Y behind the first hub, both taken as busy.
  EXPECT_TRUE(r.has("gmem: barriers made=2 context=0 streams_checked=4 busy=2")) << r.child.output;
}

TEST(barriers, pinned_host_pools_always_synchronize) {
  const probe_run r = run_probe("dlsym", "barrier_host");
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("barrier_host reused=1 host_syncs=1")) << r.child.output;
  EXPECT_TRUE(r.has("kind=host")) << r.child.output;
  EXPECT_EQ(r.pool_stat("host", "barriers"), 0u) << r.child.output;
  EXPECT_EQ(r.pool_stat("host", "fences"), 1u) << r.child.output;
}

// Freed arena pages go back on gmem_empty_cache: retired, then (the empty-cache
// synchronization completed their event) unmapped, their physical memory released.
TEST(arena, empty_cache_unmaps_and_releases_every_page) {
  for (const char* vmm : {"0", "1"}) {
    const probe_run r = run_probe("dlsym", "arena_trim", {{"GMEM_ARENA", "1"}, {"GMEM_VMM", vmm}});
    EXPECT_PROBE_OK(r);
    const std::uint64_t maps = r.value("arena_trim ", "maps");
    EXPECT_GT(maps, 0u) << r.child.output;
    EXPECT_EQ(r.value("arena_trim ", "unmaps_before"), 0u) << r.child.output; // cached till then
    EXPECT_EQ(r.value("arena_trim ", "unmaps"), maps) << r.child.output;
    EXPECT_EQ(r.value("arena_trim ", "releases"), r.value("arena_trim ", "creates"))
        << r.child.output;
    EXPECT_EQ(r.value("gmem: vmm ", "arena_unmapped_pages"), maps) << r.child.output;
    EXPECT_EQ(r.value("gmem: vmm ", "spare_bytes"), 0u) << r.child.output;
  }
}

// Arena pages given back while a kernel still writes into them retire (the fake's cuMemUnmap
// leaves the range inaccessible: the probe would crash), the host never waits, and their
// physical memory serves the next extend at once, ordered after the old kernel.
TEST(arena, pages_retire_without_blocking_the_host) {
  for (const char* vmm : {"0", "1"}) {
    const probe_run r = run_probe(
        "dlsym", "vmm_retire", {{"GMEM_ARENA", "1"}, {"GMEM_VMM", vmm}, {"GMEM_MAX_CACHED", "1"}});
    EXPECT_PROBE_OK(r);
    EXPECT_TRUE(r.has("vmm_retire host_syncs=0 creates_at_once=0 corrupted=0 unmaps_at_once=0 "))
        << r.child.output;
    EXPECT_GT(r.value("vmm_retire ", "unmaps_later"), 0u) << r.child.output;
    EXPECT_GT(r.value("gmem: vmm ", "arena_unmapped_pages"), 0u) << r.child.output;
    EXPECT_GT(r.value("gmem: vmm ", "arena_pages_recycled"), 0u) << r.child.output;
  }
}

// Arena pages are created shareable (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) when the
// device supports it, so arena blocks export; where it does not (the attribute says no, or
// cuMemCreate refuses the handle type and the shim retries without it), the arena still serves
// and IPC of its blocks is refused with a warning.
TEST(arena, ipc_of_arena_memory_needs_shareable_pages) {
  const probe_run r = run_probe("runtime", "arena_ipc", {{"GMEM_ARENA", "1"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("arena_ipc rc=0 gmem_handle=1")) << r.child.output;
  EXPECT_FALSE(r.has("gmem: warning: cuIpcGetMemHandle")) << r.child.output;
  EXPECT_GT(r.counter("vmm_exports"), 0u) << r.child.output;
  for (const char* mode : {"0", "create"}) {
    const probe_run no =
        run_probe("runtime", "arena_ipc", {{"GMEM_ARENA", "1"}, {"FAKE_CUDA_FD_EXPORT", mode}});
    EXPECT_PROBE_OK(no) << mode;
    EXPECT_TRUE(no.has("arena_ipc rc=801 gmem_handle=0")) << no.child.output; // NOT_SUPPORTED
    EXPECT_TRUE(no.has("gmem: warning: cuIpcGetMemHandle of pooled memory")) << no.child.output;
    EXPECT_GT(no.counter("vmm_creates"), 0u) << no.child.output; // the arena served
    EXPECT_EQ(no.counter("vmm_exports"), 0u) << no.child.output;
  }
}

// Stitching (GMEM_STITCH=1): a request that no free arena range fits is served from the free
// pages mapped into a range of their own (no new physical memory: no cuMemCreate), keeps its
// bytes and the others', exports for CUDA IPC like arena memory, and the range stays mapped
// while a slow kernel still writes it after its free, whose pages then serve two requests
// that keep their bytes. Off, the arena grows.
TEST(arena, stitching_serves_from_free_pages_without_growing) {
  const probe_run r =
      run_probe("runtime", "arena_stitch", {{"GMEM_ARENA", "1"}, {"GMEM_STITCH", "1"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("arena_stitch corrupted=0 outside=1 creates_at_once=0 maps_at_once=4 ipc_rc=0 "
                    "gmem_handle=1\n"))
      << r.child.output;
  EXPECT_EQ(r.value("gmem: vmm ", "stitches"), 1u) << r.child.output;
  EXPECT_EQ(r.value("gmem: vmm ", "stitched_pages"), 4u) << r.child.output;
  EXPECT_EQ(r.value("gmem: vmm ", "unstitches"), 1u) << r.child.output;
  EXPECT_EQ(r.pool_stat("device", "stitches"), 1u) << r.child.output;
  EXPECT_EQ(r.pool_stat("device", "stitched_ranges"), 0u) << r.child.output;
  EXPECT_TRUE(r.has("arena_stitch_trim creates=8 releases=8\n")) << r.child.output;
  // At a limit that growing would cross, stitching serves within it.
  const probe_run limited =
      run_probe("runtime", "arena_stitch",
                {{"GMEM_ARENA", "1"}, {"GMEM_STITCH", "1"}, {"GMEM_LIMIT", "16M"}});
  EXPECT_PROBE_OK(limited);
  EXPECT_TRUE(limited.has("arena_stitch corrupted=0 outside=1 creates_at_once=0 maps_at_once=4 "
                          "ipc_rc=0 gmem_handle=1\n"))
      << limited.child.output;
  EXPECT_EQ(limited.pool_stat("device", "ooms"), 0u) << limited.child.output;
  EXPECT_LE(limited.pool_stat("device", "peak_reserved_bytes"), 16u << 20) << limited.child.output;
  const probe_run off =
      run_probe("runtime", "arena_stitch", {{"GMEM_ARENA", "1"}, {"GMEM_ARENA_PAGE_MB", "2"}});
  EXPECT_PROBE_OK(off);
  EXPECT_TRUE(off.has("arena_stitch corrupted=0 outside=1 creates_at_once=4 maps_at_once=4 "
                      "ipc_rc=0 gmem_handle=1\n"))
      << off.child.output;
  EXPECT_EQ(off.pool_stat("device", "stitches"), 0u) << off.child.output;
}

// CUDA IPC between two processes (interpose/ipc/ipc_sharing.h, tests/interpose/ipc_probe.cpp): six
// blocks exported by a process under gmem: three of one pooled segment, a 64 MiB buffer and two
// blocks of one arena page (with the default options the last three are arena memory, whose
// pages travel as file descriptors over the exporter's socket). The importer under gmem maps
// each at the right address (reads its bytes, writes land in the exporter's block), closes and
// reopens some, opens one twice, and forged handles fail; an importer without gmem opens the
// block at the segment's start and gets an error, never a pointer, for the others. Neither
// under gmem: the reference. The exporter's registry is gone after it exits.
probe_run run_ipc(const std::vector<std::string>& args, env_list env, bool preload = true) {
  const std::string dir = gmem::test::self_dir();
  env_list full = {{"LD_LIBRARY_PATH", dir + "/fake_cuda"}, {"GMEM_TRACE", "0"}};
  if (preload) full.push_back({"LD_PRELOAD", dir + "/../lib/libgmem.so"});
  full.insert(full.end(), env.begin(), env.end());
  std::vector<std::string> argv = {dir + "/interpose/ipc_probe"};
  argv.insert(argv.end(), args.begin(), args.end());
  probe_run r;
  r.child = gmem::test::run_child(argv, full);
  return r;
}
probe_run run_ipc(const std::string& mode, env_list env, bool preload = true) {
  return run_ipc(std::vector<std::string>{"export", mode}, std::move(env), preload);
}

bool registry_left(const probe_run& r) {
  const auto at = r.child.output.find("ipc export pid=");
  if (at == std::string::npos) return true;
  const std::string prefix =
      "gmem-ipc." + std::to_string(std::stoul(r.child.output.substr(at + 15))) + ".";
  const gmem::test::child_result ls = gmem::test::run_child({"/bin/ls", "/dev/shm"}, {});
  return ls.output.find(prefix) != std::string::npos;
}

TEST(ipc, pooled_blocks_shared_with_an_importer_under_gmem) {
  const env_list configs[] = {{}, {{"GMEM_ARENA", "0"}}, {{"GMEM_VMM", "1"}}};
  for (const env_list& env : configs) {
    const std::string name = env.empty() ? "defaults" : env[0].first + "=" + env[0].second;
    const probe_run r = run_ipc("gmem", env);
    EXPECT_PROBE_OK(r) << name;
    EXPECT_TRUE(r.has("ipc import done failures=0")) << r.child.output;
    for (int i = 0; i < 6; ++i) {
      EXPECT_TRUE(r.has("ipc export block=" + std::to_string(i) + " rc=0\n")) << r.child.output;
    }
    EXPECT_TRUE(r.has("ipc import block=1 forged=12 rc=400")) << r.child.output; // INVALID_HANDLE
    EXPECT_FALSE(r.has("gmem: warning: cuIpcGetMemHandle")) << r.child.output;
    EXPECT_FALSE(registry_left(r)) << r.child.output;
    if (name == "GMEM_ARENA=0") continue; // the 64 MiB buffer is a segment: the driver's handle
    EXPECT_TRUE(r.has("ipc export same_page=1")) << r.child.output;
    for (const char* forged : {"block=3 forged=12 rc=400", "block=3 forged=16 rc=400",
                               "block=3 forged=24 rc=400", "block=5 forged=24 rc=400"}) {
      EXPECT_TRUE(r.has(std::string("ipc import ") + forged)) << forged << r.child.output;
    }
    EXPECT_TRUE(r.has("the exporter does not know this handle")) << r.child.output;
  }
}

TEST(ipc, importer_without_gmem_gets_an_error_never_a_wrong_pointer) {
  const probe_run r = run_ipc("plain", {});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("ipc import block=0 rc=0 first=0x11")) << r.child.output;
  for (int i = 1; i < 6; ++i) { // gmem handles: bytes the driver never issued (INVALID_VALUE)
    EXPECT_TRUE(r.has("ipc import block=" + std::to_string(i) + " rc=1 ")) << r.child.output;
  }
}

TEST(ipc, the_probe_passes_without_gmem) {
  const probe_run r = run_ipc("native", {}, false);
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("ipc import done failures=0")) << r.child.output;
}

// A block of 225 arena pages (2 MiB each): its descriptors take two messages, and the importer
// maps the pages in order (a marker every page).
TEST(ipc, a_block_of_many_pages_is_mapped_in_order) {
  const probe_run r = run_ipc(std::vector<std::string>{"export-big"},
                              {{"GMEM_ARENA_PAGE_MB", "2"}, {"FAKE_CUDA_REPORT", "1"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("ipc export-big rc=0")) << r.child.output;
  EXPECT_TRUE(r.has("ipc import-big markers_wrong=0")) << r.child.output;
  const auto at = r.child.output.find("fake_cuda: vmm_imports=");
  ASSERT_NE(at, std::string::npos) << r.child.output;
  EXPECT_GE(std::stoull(r.child.output.substr(at + 23)), 225u) << r.child.output; // the pages
}

// The handles of an arena block outlive their exporter: opening one fails loudly, whether the
// exporter's socket is gone or another process took its name (the importer checks that the
// peer is the exporter's pid and uid).
TEST(ipc, handles_of_an_exited_exporter_fail) {
  const std::string file = "/tmp/ipc-probe-handles." + std::to_string(::getpid());
  const probe_run ex = run_ipc(std::vector<std::string>{"export-only", file}, {});
  ASSERT_EQ(ex.child.exit_code, 0) << ex.child.output;
  const probe_run gone = run_ipc(std::vector<std::string>{"import-gone", file}, {});
  EXPECT_PROBE_OK(gone);
  EXPECT_TRUE(gone.has("ipc import-gone rc=400")) << gone.child.output;
  EXPECT_TRUE(gone.has("cannot reach the exporter's socket")) << gone.child.output;
  const probe_run squat = run_ipc(std::vector<std::string>{"squat", file}, {});
  EXPECT_PROBE_OK(squat);
  EXPECT_TRUE(squat.has("ipc import-gone rc=400")) << squat.child.output;
  EXPECT_TRUE(squat.has("not to the exporter")) << squat.child.output;
  const probe_run plain = run_ipc(std::vector<std::string>{"import-gone", file}, {}, false);
  EXPECT_PROBE_OK(plain);
  EXPECT_TRUE(plain.has("ipc import-gone rc=1")) << plain.child.output; // the driver's refusal
  std::remove(file.c_str());
}

TEST(arena, page_size_option) {
  const probe_run r =
      run_probe("dlsym", "arena_growth", {{"GMEM_ARENA", "1"}, {"GMEM_ARENA_PAGE_MB", "2"}});
  EXPECT_PROBE_OK(r);
  // 188 MiB of large blocks (probe_arena.cpp) in 2 MiB pages.
  EXPECT_GE(r.value("gmem: vmm ", "arena_pages_mapped"), 94u) << r.child.output;
  const probe_run bad =
      run_probe("dlsym", "arena_growth", {{"GMEM_ARENA", "1"}, {"GMEM_ARENA_PAGE_MB", "3"}});
  EXPECT_PROBE_OK(bad);
  EXPECT_TRUE(bad.has("gmem: warning: GMEM_ARENA_PAGE_MB='3' is not a power of two from 2 to "
                      "1048576; using 16"))
      << bad.child.output;
}

TEST(shim, without_the_shim_every_allocation_reaches_the_driver) {
  const probe_run r = run_probe("dlsym", "basic", {}, false);
  EXPECT_PROBE_OK(r);
  EXPECT_EQ(r.counter("mem_alloc_calls"), 200u);
}

TEST(shim, disabled_shim_passes_through) {
  const probe_run r = run_probe("runtime", "basic", {{"GMEM_ENABLE", "0"}});
  EXPECT_PROBE_OK(r);
  EXPECT_EQ(r.counter("mem_alloc_calls"), 200u);
}

TEST(shim, without_the_shim_the_hazard_program_is_correct) {
  const probe_run r = run_probe("dlsym", "hazard", {}, false);
  EXPECT_PROBE_OK(r);
}

TEST(shim, mem_get_info_reports_the_limit_and_cached_memory) {
  const probe_run r = run_probe("runtime", "meminfo", {{"GMEM_LIMIT", "64M"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("meminfo start free=67108864 total=67108864")) << r.child.output;
  EXPECT_TRUE(r.has("meminfo allocated free=50331648 total=67108864")) << r.child.output;
  EXPECT_TRUE(r.has("meminfo freed free=67108864 total=67108864")) << r.child.output;
}

TEST(shim, mem_get_info_counts_cached_memory_as_free) {
  const probe_run r = run_probe("dlsym", "meminfo", {{"FAKE_CUDA_TOTAL_BYTES", "1G"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("meminfo start free=1073741824 total=1073741824")) << r.child.output;
  EXPECT_TRUE(r.has("meminfo freed free=1073741824 total=1073741824")) << r.child.output;
}

TEST(shim, limit_as_percentage_of_the_device) {
  const probe_run r =
      run_probe("runtime", "meminfo", {{"GMEM_LIMIT", "50%"}, {"FAKE_CUDA_TOTAL_BYTES", "128M"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("meminfo freed free=67108864 total=67108864")) << r.child.output;
}

TEST(shim, bad_option_warns_and_keeps_running) {
  const probe_run r = run_probe("dlsym", "basic", {{"GMEM_LIMIT", "12X"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("gmem: warning: GMEM_LIMIT='12X' is not a size; using no limit"))
      << r.child.output;
}

TEST(shim, old_abi_entry_points_are_not_substituted) {
  const probe_run r = run_probe("runtime", "old_abi");
  EXPECT_PROBE_OK(r);
  EXPECT_EQ(r.counter("mem_alloc_calls"), 1u); // the 32-bit cuMemAlloc went to the driver
  EXPECT_EQ(r.counter("smallest_alloc"), 1000u);
}

TEST(shim, other_interposer_keeps_its_rtld_next) {
  const std::string dir = gmem::test::self_dir();
  const std::string other = dir + "/interpose/libother_interposer.so";
  const std::string shim = dir + "/../lib/libgmem.so";
  for (const std::string& preload : {shim + " " + other, other + " " + shim}) {
    const probe_run r = run_probe("runtime", "other_interposer", {{"LD_PRELOAD", preload}});
    EXPECT_EQ(r.child.signal, 0) << preload << ": " << r.child.output;
    EXPECT_PROBE_OK(r);
    EXPECT_TRUE(r.has("total_allocs=1")) << r.child.output;
  }
}

TEST(shim, one_pool_per_device) {
  const probe_run r = run_probe("dlsym", "two_devices", {{"FAKE_CUDA_DEVICES", "2"}});
  EXPECT_PROBE_OK(r);
  EXPECT_TRUE(r.has("device=0 kind=device live_bytes=0")) << r.child.output;
  EXPECT_TRUE(r.has("device=1 kind=device live_bytes=0")) << r.child.output;
}

} // namespace
