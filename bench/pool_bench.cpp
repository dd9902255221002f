// The pool's own cost, without a GPU: fake upstream (segments back to back, no driver) and
// fake fences (events complete at once), so what is measured is the host arithmetic under the
// lock. Prints per alloc+free pair on a warmed pool for 512 B .. 256 MiB, the random workload
// (1,000 live blocks, log-uniform 256 B .. 64 MiB, random free order) per op with
// peak reserved / peak live, trace_cost's pattern on the shim's default policy, and pairs
// from 1/2/4/8 threads on one pool.
//   build/bench/pool_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
#include "pool/pool.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

namespace {

using namespace gmem;

class bench_upstream : public upstream {
public:
  std::uintptr_t map(std::size_t bytes) noexcept override {
    return next_.fetch_add(bytes, std::memory_order_relaxed);
  }
  void unmap(std::uintptr_t, std::size_t) noexcept override {}

private:
  std::atomic<std::uintptr_t> next_{std::uintptr_t{1} << 40};
};

// The shim's default upstream shape: an arena of 16 MiB pages (GMEM_ARENA_PAGE_MB) reserved
// up front, grown where it ends, beside 2 MiB small segments.
class arena_upstream final : public bench_upstream {
public:
  std::size_t arena_page() const noexcept override { return std::size_t{16} << 20; }
  std::uintptr_t extend(std::uintptr_t at, std::size_t bytes) noexcept override {
    const std::uintptr_t base = at != 0 ? at : top_;
    top_ = std::max(top_, base + bytes);
    return base;
  }

private:
  std::uintptr_t top_ = std::uintptr_t{1} << 46;
};

class bench_fences : public fences {
public:
  bool synchronize() noexcept override { return true; }
  bool barrier() noexcept override { return true; }
  event_handle record(stream_handle) noexcept override { return 1; } // the pool never compares them
  bool query(event_handle) noexcept override { return true; }
  bool wait(stream_handle, event_handle) noexcept override { return true; }
  void release(event_handle) noexcept override {}
};

constexpr stream_handle k_stream = 7;

// One alloc+free pair of state.range(0) bytes on a warmed pool. range(1): 0 = on a stream
// (cudaMallocAsync/cudaFreeAsync), 1 = stream-less (cudaMalloc/cudaFree: pending + fences).
void BM_pair(benchmark::State& state) {
  bench_upstream up;
  bench_fences fe;
  pool p(up, fe, pool_options{});
  const auto size = static_cast<std::size_t>(state.range(0));
  const stream_handle s = state.range(1) == 0 ? k_stream : k_no_stream;
  // Warm: a few live neighbours so the pair splits and coalesces like in a real program.
  std::vector<std::uintptr_t> keep;
  for (int i = 0; i < 4; ++i)
    keep.push_back(p.allocate(size, s).address);
  for (int i = 0; i < 64; ++i)
    p.deallocate(p.allocate(size, s).address, s);
  for (auto _ : state) {
    alloc_result r = p.allocate(size, s);
    benchmark::DoNotOptimize(r.address);
    p.deallocate(r.address, s);
  }
  state.counters["maps"] = static_cast<double>(p.stats().segment_maps);
}
BENCHMARK(BM_pair)
    ->ArgNames({"bytes", "streamless"})
    ->ArgsProduct({{512, 4 << 10, 64 << 10, 1 << 20, 16 << 20, 256 << 20}, {0, 1}});

// The random workload. Each iteration frees one random live block and allocates a new one
// (two ops). Counters: ns_per_op, reserved_over_live = peak reserved / peak live (requested
// bytes), reserved_over_live_rounded (live in rounded block sizes), maps per 1,000 ops.
void BM_random(benchmark::State& state) {
  bench_upstream up;
  bench_fences fe;
  pool_options o;
  pool p(up, fe, o);
  const stream_handle s = state.range(0) == 0 ? k_stream : k_no_stream;
  constexpr std::size_t k_live = 1000, k_script = 1 << 20;
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> log_size(std::log(256.0), std::log(64.0 * (1 << 20)));
  auto draw = [&] { return static_cast<std::size_t>(std::exp(log_size(rng))); };
  std::vector<std::size_t> sizes(k_script), victims(k_script);
  for (std::size_t i = 0; i < k_script; ++i) {
    sizes[i] = draw();
    victims[i] = rng() % k_live;
  }
  std::vector<std::uintptr_t> addr(k_live);
  std::vector<std::size_t> req(k_live);
  std::size_t live = 0, peak_live = 0;
  for (std::size_t i = 0; i < k_live; ++i) {
    req[i] = draw();
    addr[i] = p.allocate(req[i], s).address;
    live += req[i];
  }
  p.reset_peaks();
  peak_live = live;
  std::size_t i = 0, failures = 0;
  for (auto _ : state) {
    std::size_t v = victims[i];
    p.deallocate(addr[v], s);
    live -= req[v];
    req[v] = sizes[i];
    alloc_result r = p.allocate(req[v], s);
    failures += r.status != pool_status::ok;
    addr[v] = r.address;
    live += req[v];
    peak_live = std::max(peak_live, live);
    if (++i == k_script) i = 0;
  }
  pool_stats st = p.stats();
  state.counters["ns_per_op"] =
      benchmark::Counter(2.0 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["reserved_over_live"] =
      static_cast<double>(st.peak_reserved_bytes) / static_cast<double>(peak_live);
  state.counters["reserved_over_live_rounded"] =
      static_cast<double>(st.peak_reserved_bytes) / static_cast<double>(st.peak_live_bytes);
  state.counters["maps_per_kop"] = 1000.0 * static_cast<double>(st.segment_maps) /
                                   (2.0 * static_cast<double>(state.iterations()));
  state.counters["failures"] = static_cast<double>(failures);
}
BENCHMARK(BM_random)->ArgNames({"streamless"})->Arg(0)->Arg(1)->Iterations(1 << 20);

// The tracing issue's C++ program (bench/trace_cost.cu) on the shim's default policy (arena,
// barriers): one thread, stream-less pairs (cudaMalloc + cudaFree) of log-uniform sizes
// 256 B - 4 MiB, 8 blocks live, the oldest freed after each allocation. The pool's share of
// trace_cost's driver route, without the hooks, the driver's event record or the clock.
// stream:1 makes the same pairs on one stream (trace_cost's async route: cudaMallocAsync +
// cudaFreeAsync), through the thread's cache as in the shim.
void BM_cudamalloc_pattern(benchmark::State& state) {
  arena_upstream up;
  bench_fences fe;
  pool_options o;
  o.arena = true;
  o.barriers = true;
  o.reuse_safety = state.range(0) != 0;
  const stream_handle s = state.range(1) != 0 ? k_stream : k_no_stream;
  pool p(up, fe, o);
  constexpr std::size_t k_script = 1 << 16;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> lg(8.0, 22.0);
  std::vector<std::size_t> sizes(k_script);
  for (std::size_t& n : sizes)
    n = static_cast<std::size_t>(std::exp2(lg(rng)));
  std::vector<std::uintptr_t> live(8);
  for (std::size_t k = 0; k < live.size(); ++k)
    live[k] = p.allocate(sizes[k], s).address;
  std::size_t i = 0, victim = 0, failures = 0;
  for (auto _ : state) {
    alloc_result r = p.allocate(sizes[i], s);
    failures += r.status != pool_status::ok;
    p.deallocate(live[victim], s);
    live[victim] = r.address;
    if (++victim == live.size()) victim = 0;
    if (++i == k_script) i = 0;
  }
  const pool_stats st = p.stats();
  state.counters["fences_per_kpair"] =
      1000.0 * static_cast<double>(st.fences) / static_cast<double>(state.iterations());
  state.counters["peak_reserved_MiB"] = static_cast<double>(st.peak_reserved_bytes) / (1 << 20);
  state.counters["failures"] = static_cast<double>(failures);
}
BENCHMARK(BM_cudamalloc_pattern)
    ->ArgNames({"reuse_safety", "stream"})
    ->Args({1, 0})
    ->Args({0, 0})
    ->Args({1, 1});

// Pairs from several threads on one pool, each on its own stream, 64 KiB.
std::unique_ptr<pool> g_shared;
bench_upstream g_up;
bench_fences g_fe;
void BM_pair_threads(benchmark::State& state) {
  if (state.thread_index() == 0) g_shared = std::make_unique<pool>(g_up, g_fe, pool_options{});
  // Benchmark's threads start the loop together, after thread 0's setup.
  const stream_handle s = 100 + static_cast<stream_handle>(state.thread_index());
  for (auto _ : state) {
    alloc_result r = g_shared->allocate(64 << 10, s);
    benchmark::DoNotOptimize(r.address);
    g_shared->deallocate(r.address, s);
  }
  if (state.thread_index() == 0) {
    state.counters["contended_maps"] = static_cast<double>(g_shared->stats().segment_maps);
  }
}
BENCHMARK(BM_pair_threads)
    ->Threads(1)
    ->Threads(2)
    ->Threads(4)
    ->Threads(8)
    ->Threads(16)
    ->UseRealTime();

} // namespace

BENCHMARK_MAIN();
