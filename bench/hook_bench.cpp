// Cost of the hook path without the CUDA runtime: alloc+free pairs through a driver reached by
// dlopen + dlsym (route 2 of docs/design.md "Interception") or dlopen + cuGetProcAddress (route 3),
// with the shared harness (alloc_harness.h).
//   hook_bench [--route dlsym|proc] [--api sync|async|both] [harness options]
// sync: cuMemAlloc_v2 / cuMemFree_v2 (what cudaMalloc / cudaFree reach); async:
// cuMemAllocAsync / cuMemFreeAsync on a non-blocking stream of each thread's own (what
// cudaMallocAsync reaches). Each run first measures the floor in the same process: a pair of
// the cheapest driver calls (cuCtxGetCurrent) through the same route and timer, so a row's
// cost above the floor is the shim's and the pool's. On the fake driver it also prints the
// driver calls the shim made per pair (fakeGetCounters: event records, capture queries,
// synchronizations, stream waits), which do not depend on the machine's load.
// With the fake driver (LD_LIBRARY_PATH=build/tests/fake_cuda) it needs no GPU, so the shim's
// own cost can be profiled on any machine:
//   LD_LIBRARY_PATH=build/tests/fake_cuda LD_PRELOAD=build/lib/libgmem.so GMEM_TRACE=0
//   build/bench/hook_bench --tests pair --sizes 512,64K,1M
// (the fake driver's own allocation memsets host memory, so compare with and without the
// shim only at sizes the pool serves from cache after warm-up).
// --tests mix: trace_cost's pattern (bench/trace_cost.cu) on this route, on every thread count
// of --threads: each thread keeps 8 blocks live and replaces one per pair by a log-uniform
// 256 B - 4 MiB block (allocate the new one, then free the old), --seconds per thread count.
// Prints mean / p50 / p99 per pair over all threads and the wall time per pair of all threads
// together (with more threads than cores, what contention costs shows there); with one thread
// under gmem, also the pairs during which the pool fenced and the others (gmem_stats' fence
// counter read outside the timed span, as trace_cost's split does; --no-split leaves it out, so
// that a profile of the run holds only the pairs' own work).
#include "alloc_harness.h"
#include "tests/fake_cuda/fake_cuda.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

using alloc_fn = CUresult (*)(CUdeviceptr*, std::size_t);
using free_fn = CUresult (*)(CUdeviceptr);
using init_fn = CUresult (*)(unsigned);
using retain_fn = CUresult (*)(CUcontext*, CUdevice);
using set_fn = CUresult (*)(CUcontext);
using proc_fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using alloc_async_fn = CUresult (*)(CUdeviceptr*, std::size_t, CUstream);
using free_async_fn = CUresult (*)(CUdeviceptr, CUstream);
using stream_create_fn = CUresult (*)(CUstream*, unsigned);
using stream_destroy_fn = CUresult (*)(CUstream);
using get_current_fn = CUresult (*)(CUcontext*);

class driver_calls final : public gmem_bench::allocator_under_test {
public:
  driver_calls(alloc_fn a, free_fn f, retain_fn r, set_fn s)
      : alloc_(a), free_(f), retain_(r), set_(s) {}
  const char* name() const override { return "cuMemAlloc_v2 (dlopen)"; }
  void thread_begin(int) override {
    CUcontext c = nullptr;
    if (retain_(&c, 0) == CUDA_SUCCESS) set_(c);
  }
  void* allocate(std::size_t bytes, int) override {
    CUdeviceptr p = 0;
    if (CUresult r = alloc_(&p, bytes); r != CUDA_SUCCESS) {
      std::fprintf(stderr, "hook_bench: cuMemAlloc_v2(%zu) failed: %d\n", bytes, int(r));
      return nullptr;
    }
    return reinterpret_cast<void*>(p);
  }
  bool deallocate(void* p, std::size_t, int) override {
    return free_(reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS;
  }

private:
  alloc_fn alloc_;
  free_fn free_;
  retain_fn retain_;
  set_fn set_;
};

struct async_fns {
  alloc_async_fn alloc = nullptr;
  free_async_fn release = nullptr;
  stream_create_fn create = nullptr;
  stream_destroy_fn destroy = nullptr;
};

// cuMemAllocAsync / cuMemFreeAsync, each thread on a non-blocking stream of its own.
class async_calls final : public gmem_bench::allocator_under_test {
public:
  async_calls(async_fns f, retain_fn r, set_fn s) : f_(f), retain_(r), set_(s), streams_(64) {}
  const char* name() const override { return "cuMemAllocAsync (dlopen)"; }
  void thread_begin(int t) override {
    CUcontext c = nullptr;
    if (retain_(&c, 0) == CUDA_SUCCESS) set_(c);
    if (f_.create(&streams_[slot(t)], CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS)
      std::fprintf(stderr, "hook_bench: cuStreamCreate failed\n");
  }
  void thread_end(int t) override { (void)f_.destroy(streams_[slot(t)]); }
  void* allocate(std::size_t bytes, int t) override {
    CUdeviceptr p = 0;
    if (CUresult r = f_.alloc(&p, bytes, streams_[slot(t)]); r != CUDA_SUCCESS) {
      std::fprintf(stderr, "hook_bench: cuMemAllocAsync(%zu) failed: %d\n", bytes, int(r));
      return nullptr;
    }
    return reinterpret_cast<void*>(p);
  }
  bool deallocate(void* p, std::size_t, int t) override {
    return f_.release(reinterpret_cast<CUdeviceptr>(p), streams_[slot(t)]) == CUDA_SUCCESS;
  }

private:
  static std::size_t slot(int t) { return static_cast<std::size_t>(t) % 64; }
  async_fns f_;
  retain_fn retain_;
  set_fn set_;
  std::vector<CUstream> streams_;
};

// The floor: two of the cheapest driver calls per "pair", through the same route and timer.
class floor_calls final : public gmem_bench::allocator_under_test {
public:
  floor_calls(get_current_fn g, retain_fn r, set_fn s) : get_(g), retain_(r), set_(s) {}
  const char* name() const override { return "floor: 2 x cuCtxGetCurrent"; }
  void thread_begin(int) override {
    CUcontext c = nullptr;
    if (retain_(&c, 0) == CUDA_SUCCESS) set_(c);
  }
  void* allocate(std::size_t, int) override {
    CUcontext c = nullptr;
    return get_(&c) == CUDA_SUCCESS ? static_cast<void*>(this) : nullptr;
  }
  bool deallocate(void*, std::size_t, int) override {
    CUcontext c = nullptr;
    return get_(&c) == CUDA_SUCCESS;
  }

private:
  get_current_fn get_;
  retain_fn retain_;
  set_fn set_;
};

// The fake driver's counters (tests/fake_cuda/fake_cuda.h); absent on a real driver.
using counters_fn = void (*)(fake_cuda_counters*);
struct fake_counters {
  counters_fn get = nullptr;
  std::vector<std::pair<const char*, std::uint64_t>> read() const {
    fake_cuda_counters c{};
    if (get != nullptr) get(&c);
    return {
#define HOOK_BENCH_ROW(n) {#n, c.n},
        FAKE_CUDA_COUNTERS(HOOK_BENCH_ROW)
#undef HOOK_BENCH_ROW
    };
  }
};

bool g_split = true; // --no-split: no gmem_stats() calls between pairs (for instruction counts)

struct mix_row {
  std::size_t pairs = 0;
  double mean = 0, p50 = 0, p99 = 0;
};
mix_row summarize_mix(std::vector<std::uint32_t>& ns) {
  mix_row r;
  r.pairs = ns.size();
  if (ns.empty()) return r;
  std::sort(ns.begin(), ns.end());
  double sum = 0;
  for (std::uint32_t v : ns)
    sum += v;
  r.mean = sum / static_cast<double>(ns.size());
  r.p50 = ns[ns.size() / 2];
  r.p99 = ns[std::min(ns.size() - 1, ns.size() * 99 / 100)];
  return r;
}
void print_mix(const std::string& label, int threads, const char* part, const mix_row& r,
               double wall_per_pair) {
  std::printf("%-22s mix %-10s %2d thr  mean %8.0f ns  p50 %8.0f ns  p99 %9.0f ns", label.c_str(),
              part, threads, r.mean, r.p50, r.p99);
  if (wall_per_pair > 0) std::printf("  wall/pair %8.1f ns", wall_per_pair);
  std::printf("  (%zu pairs)\n", r.pairs);
}

// trace_cost's pattern on `a` (see the header comment), once per thread count; returns the
// pairs made, warm-up included.
std::uint64_t run_mix(gmem_bench::allocator_under_test& a, const gmem_bench::harness_options& o) {
  using stats_fn = gmem_status (*)(int, gmem_stats_t*);
  const auto stats = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "gmem_stats"));
  auto fences = [stats] {
    gmem_stats_t st{};
    st.struct_size = sizeof st;
    return stats != nullptr && stats(0, &st) == GMEM_OK ? st.fences : 0;
  };
  std::atomic<std::uint64_t> made{0};
  for (int threads : o.threads) {
    const bool split = g_split && threads == 1 && stats != nullptr;
    std::vector<std::vector<std::uint32_t>> ns(static_cast<std::size_t>(threads));
    std::vector<std::uint32_t> fenced, other;
    const auto budget = static_cast<std::uint64_t>(o.seconds_per_cell * 1e9);
    std::atomic<std::uint64_t> first_start{~std::uint64_t{0}}, last_end{0};
    const bool ok = gmem_bench::run_threads(threads, [&](int t) {
      a.thread_begin(t);
      std::mt19937_64 rng(7 + static_cast<std::uint64_t>(t));
      std::uniform_real_distribution<double> lg(8.0, 22.0);
      auto draw = [&] { return static_cast<std::size_t>(std::exp2(lg(rng))); };
      std::vector<std::pair<void*, std::size_t>> live(8);
      bool good = true;
      for (auto& b : live) {
        b.second = draw();
        b.first = a.allocate(b.second, t);
        good = good && b.first != nullptr;
      }
      auto& out = ns[static_cast<std::size_t>(t)];
      out.reserve(std::min<std::size_t>(o.max_samples_per_thread * 10, 1u << 22));
      for (int i = 0; i < o.warmup * 10 && good; ++i) { // untimed
        auto& b = live[static_cast<std::size_t>(i) % live.size()];
        const std::size_t bytes = draw();
        void* p = a.allocate(bytes, t);
        good = p != nullptr && a.deallocate(b.first, b.second, t);
        b = {p, bytes};
      }
      const std::uint64_t start = gmem_bench::now_ns();
      std::uint64_t prev = first_start.load();
      while (start < prev && !first_start.compare_exchange_weak(prev, start)) {
      }
      const std::uint64_t end = start + budget;
      for (std::size_t i = 0; good && out.size() < out.capacity(); ++i) {
        auto& b = live[i % live.size()];
        const std::size_t bytes = draw();
        const std::uint64_t f0 = split ? fences() : 0;
        const std::uint64_t t0 = gmem_bench::now_ns();
        void* p = a.allocate(bytes, t);
        good = p != nullptr && a.deallocate(b.first, b.second, t);
        const std::uint64_t t1 = gmem_bench::now_ns();
        b = {p, bytes};
        const auto d = static_cast<std::uint32_t>(std::min<std::uint64_t>(t1 - t0, UINT32_MAX));
        out.push_back(d);
        if (split) (fences() != f0 ? fenced : other).push_back(d);
        if (t1 > end) break;
      }
      const std::uint64_t stop = gmem_bench::now_ns();
      prev = last_end.load();
      while (stop > prev && !last_end.compare_exchange_weak(prev, stop)) {
      }
      made.fetch_add(out.size() + static_cast<std::size_t>(o.warmup) * 10);
      for (auto& b : live)
        if (b.first != nullptr) a.deallocate(b.first, b.second, t);
      a.thread_end(t);
      return good;
    });
    std::vector<std::uint32_t> all;
    for (auto& v : ns)
      all.insert(all.end(), v.begin(), v.end());
    const mix_row r = summarize_mix(all);
    const double wall = static_cast<double>(last_end.load() - first_start.load());
    print_mix(o.label, threads, ok ? "all" : "FAILED", r,
              r.pairs != 0 ? wall / static_cast<double>(r.pairs) : 0);
    if (split) {
      print_mix(o.label, threads, "fenced", summarize_mix(fenced), 0);
      print_mix(o.label, threads, "not fenced", summarize_mix(other), 0);
    }
  }
  return made.load();
}

// Runs the suite and, on the fake driver, prints the driver calls made per pair.
void run_counted(gmem_bench::allocator_under_test& a, const gmem_bench::harness_options& o,
                 const fake_counters& fc, std::uint64_t& pairs) {
  const auto before = fc.read();
  pairs = 0;
  if (o.tests.find("mix") != std::string::npos) {
    pairs += run_mix(a, o);
    gmem_bench::dump_gmem_stats(o);
  }
  if (o.tests.find("pair") != std::string::npos || o.tests.find("random") != std::string::npos)
    gmem_bench::run_suite(a, o, &pairs);
  if (fc.get == nullptr || pairs == 0) return;
  const auto after = fc.read();
  std::printf("%-22s driver calls per pair (fake driver, %llu pairs):", o.label.c_str(),
              static_cast<unsigned long long>(pairs));
  for (std::size_t i = 0; i < after.size(); ++i) {
    const std::string n = after[i].first;
    if (n == "live_allocs" || n == "smallest_alloc" || n == "largest_alloc") continue;
    const double per =
        static_cast<double>(after[i].second - before[i].second) / static_cast<double>(pairs);
    if (after[i].second != before[i].second) std::printf(" %s=%.4f", n.c_str(), per);
  }
  std::printf("\n");
}

template <class T> T sym(void* lib, proc_fn proc, const char* name) {
  void* p = nullptr;
  if (proc) {
    CUdriverProcAddressQueryResult q{};
    std::string base(name);
    if (auto at = base.find("_v2"); at != std::string::npos) base.resize(at);
    if (proc(base.c_str(), &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS) p = nullptr;
  } else {
    p = dlsym(lib, name);
  }
  if (!p) std::fprintf(stderr, "hook_bench: cannot find %s in libcuda.so.1\n", name);
  return reinterpret_cast<T>(p);
}

} // namespace

int main(int argc, char** argv) {
  gmem_bench::harness_options o;
  o.tests = "pair";
  o.sizes = {512, 65536, 1u << 20};
  std::string route = "dlsym", api = "both";
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--no-split") == 0) g_split = false;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--route") == 0) route = argv[i + 1];
    if (std::strcmp(argv[i], "--api") == 0) api = argv[i + 1];
  }
  if (route != "dlsym" && route != "proc") {
    std::fprintf(stderr, "hook_bench: --route must be dlsym or proc, not '%s'\n", route.c_str());
    return 2;
  }
  if (api != "sync" && api != "async" && api != "both") {
    std::fprintf(stderr, "hook_bench: --api must be sync, async or both, not '%s'\n", api.c_str());
    return 2;
  }
  gmem_bench::parse_args(o, argc, argv);
  const std::string label = o.label.empty() ? "hook-" + route : o.label;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    std::fprintf(stderr, "hook_bench: cannot load libcuda.so.1 (%s); nothing measured\n",
                 dlerror());
    return 2;
  }
  proc_fn proc = nullptr;
  if (route == "proc") proc = reinterpret_cast<proc_fn>(dlsym(lib, "cuGetProcAddress_v2"));
  auto init = sym<init_fn>(lib, nullptr, "cuInit");
  auto retain = sym<retain_fn>(lib, proc, "cuDevicePrimaryCtxRetain");
  auto set = sym<set_fn>(lib, proc, "cuCtxSetCurrent");
  auto get = sym<get_current_fn>(lib, proc, "cuCtxGetCurrent");
  auto alloc = sym<alloc_fn>(lib, proc, "cuMemAlloc_v2");
  auto release = sym<free_fn>(lib, proc, "cuMemFree_v2");
  async_fns af;
  af.alloc = sym<alloc_async_fn>(lib, proc, "cuMemAllocAsync");
  af.release = sym<free_async_fn>(lib, proc, "cuMemFreeAsync");
  af.create = sym<stream_create_fn>(lib, proc, "cuStreamCreate");
  af.destroy = sym<stream_destroy_fn>(lib, proc, "cuStreamDestroy_v2");
  if (!init || !retain || !set || !get || !alloc || !release || !af.alloc || !af.release ||
      !af.create || !af.destroy || init(0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "hook_bench: driver not usable; nothing measured\n");
    return 2;
  }
  fake_counters fc;
  fc.get = reinterpret_cast<counters_fn>(dlsym(lib, "fakeGetCounters"));
  std::uint64_t pairs = 0;
  floor_calls f(get, retain, set);
  o.label = label + "-floor";
  const std::vector<std::size_t> sizes = o.sizes;
  o.sizes = {512};
  gmem_bench::run_suite(f, o, &pairs, false);
  o.sizes = sizes;
  if (api != "async") {
    driver_calls a(alloc, release, retain, set);
    o.label = label + "-sync";
    run_counted(a, o, fc, pairs);
  }
  if (api != "sync") {
    async_calls a(af, retain, set);
    o.label = label + "-async";
    run_counted(a, o, fc, pairs);
  }
  return 0;
}
