// Allocation-cost harness shared by alloc_bench (CUDA runtime, driver, cudaMallocAsync, CUB;
// built with nvcc) and torch_alloc_bench (PyTorch's caching allocator; built on the GPU
// machine against the installed torch). Header-only so both builds use the same loops.
//
// Two tests, each run with 1, 4 and 16 threads sharing one allocator:
//   pair    one thread allocates and frees the same size over and over; each sample is the
//           host time of one allocate+free pair.
//   random  1,000 live blocks in all (split evenly over the threads), sizes log-uniform in
//           [256 B, 64 MiB]; each step frees a random live block and allocates a new one of a
//           random size; each sample is one call (an allocate or a free).
// Warm-up iterations run first and are not timed, so caching allocators are measured in their
// steady state. Samples of all threads are pooled; the median and p99 are reported.
#pragma once

#include "include/gmem/gmem.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace gmem_bench {

// One allocator under test. allocate() returns nullptr on failure (after printing why);
// every method may be called from several threads at once.
class allocator_under_test {
public:
  virtual ~allocator_under_test() = default;
  virtual const char* name() const = 0;
  virtual void thread_begin(int /*thread_index*/) {}
  virtual void thread_end(int /*thread_index*/) {}
  virtual void* allocate(std::size_t bytes, int thread_index) = 0;
  virtual bool deallocate(void* p, std::size_t bytes, int thread_index) = 0;
};

struct harness_options {
  std::string label;                 // column name in the report, e.g. "gmem-runtime"
  std::string tests = "pair,random"; // which tests
  std::vector<std::size_t> sizes{512, 65536, 1u << 20, 16u << 20, 256u << 20};
  std::vector<int> threads{1, 4, 16};
  double seconds_per_cell = 0.25; // timed phase of one (test, size, threads) cell
  std::size_t max_samples_per_thread = 20000;
  int warmup = 20;                // untimed pairs / steps per thread
  std::size_t live_blocks = 1000; // random test, all threads together
  std::size_t random_min = 256, random_max = std::size_t{64} << 20;
  std::string json_path; // one JSON object per line (appended)
};

struct cell_result {
  std::string test;
  std::size_t size = 0; // 0 for the random test
  int threads = 0;
  std::size_t samples = 0;
  double median_ns = 0, p99_ns = 0, mean_ns = 0;
  std::uint64_t ops = 0; // pairs (pair test) or calls (random test) made, warm-up included
  bool failed = false;
};

inline std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// Where several threads are timed, their timed phases start together: each thread sets itself
// up (streams, first blocks, warm-up), then calls arrive(), which returns once every thread
// has arrived, with the time the last one did. Without it a thread whose setup waits for the
// driver starts timing late, while faster threads are already timing or done, and the per-op
// times are those of fewer threads at once (at 16 threads launching kernels, 0.5 s loops were
// seen spread over 1.5 s). Every thread of the run must call arrive() once, also one whose
// setup failed.
class start_gate {
public:
  explicit start_gate(int threads) : waiting_(threads) {}
  std::uint64_t arrive() {
    if (waiting_.fetch_sub(1) == 1) start_.store(now_ns());
    std::uint64_t start = 0;
    while ((start = start_.load()) == 0)
      std::this_thread::yield();
    return start;
  }

private:
  std::atomic<int> waiting_;
  std::atomic<std::uint64_t> start_{0};
};

// Runs body(thread_index) on n threads that start together; returns false if any failed.
template <class F> bool run_threads(int n, F body) {
  std::atomic<int> ready{0};
  std::atomic<bool> ok{true};
  std::vector<std::thread> ts;
  for (int t = 0; t < n; ++t)
    ts.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < n)
        std::this_thread::yield();
      if (!body(t)) ok.store(false);
    });
  for (auto& th : ts)
    th.join();
  return ok.load();
}

inline cell_result summarize(std::vector<std::vector<std::uint32_t>>& per_thread) {
  cell_result r;
  std::vector<std::uint32_t> all;
  for (auto& v : per_thread)
    all.insert(all.end(), v.begin(), v.end());
  r.samples = all.size();
  if (all.empty()) return r;
  std::sort(all.begin(), all.end());
  double sum = 0;
  for (auto s : all)
    sum += s;
  r.mean_ns = sum / static_cast<double>(all.size());
  r.median_ns = all[all.size() / 2];
  r.p99_ns = all[std::min(all.size() - 1, (all.size() * 99) / 100)];
  return r;
}

inline cell_result run_pair(allocator_under_test& a, const harness_options& o, std::size_t size,
                            int threads) {
  std::vector<std::vector<std::uint32_t>> samples(static_cast<std::size_t>(threads));
  const auto budget_ns = static_cast<std::uint64_t>(o.seconds_per_cell * 1e9);
  std::atomic<std::uint64_t> pairs{0};
  start_gate gate(threads);
  bool ok = run_threads(threads, [&](int t) {
    a.thread_begin(t);
    auto& out = samples[static_cast<std::size_t>(t)];
    out.reserve(o.max_samples_per_thread);
    bool good = true;
    for (int i = 0; i < o.warmup && good; ++i) {
      void* p = a.allocate(size, t);
      good = p != nullptr && a.deallocate(p, size, t);
    }
    pairs.fetch_add(static_cast<std::uint64_t>(o.warmup));
    const std::uint64_t end = gate.arrive() + budget_ns;
    while (good && out.size() < o.max_samples_per_thread) {
      const std::uint64_t t0 = now_ns();
      void* p = a.allocate(size, t);
      good = p != nullptr && a.deallocate(p, size, t);
      const std::uint64_t t1 = now_ns();
      out.push_back(static_cast<std::uint32_t>(std::min<std::uint64_t>(t1 - t0, UINT32_MAX)));
      if (t1 > end) break;
    }
    pairs.fetch_add(out.size());
    a.thread_end(t);
    return good;
  });
  cell_result r = summarize(samples);
  r.ops = pairs.load();
  r.test = "pair";
  r.size = size;
  r.threads = threads;
  r.failed = !ok;
  return r;
}

inline cell_result run_random(allocator_under_test& a, const harness_options& o, int threads) {
  std::vector<std::vector<std::uint32_t>> samples(static_cast<std::size_t>(threads));
  const auto budget_ns = static_cast<std::uint64_t>(o.seconds_per_cell * 1e9);
  const std::size_t per_thread = std::max<std::size_t>(1, o.live_blocks / std::size_t(threads));
  std::atomic<std::uint64_t> random_steps{0};
  start_gate gate(threads);
  bool ok = run_threads(threads, [&](int t) {
    a.thread_begin(t);
    std::mt19937_64 rng(0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(t));
    std::uniform_real_distribution<double> u(std::log(double(o.random_min)),
                                             std::log(double(o.random_max)));
    auto draw = [&] { return static_cast<std::size_t>(std::exp(u(rng))); };
    std::vector<std::pair<void*, std::size_t>> live(per_thread, {nullptr, 0});
    bool good = true;
    for (auto& b : live) {
      b.second = draw();
      b.first = a.allocate(b.second, t);
      if (!b.first) {
        good = false;
        break;
      }
    }
    auto& out = samples[static_cast<std::size_t>(t)];
    out.reserve(o.max_samples_per_thread);
    std::uniform_int_distribution<std::size_t> pick(0, per_thread - 1);
    std::uint64_t steps = 0;
    auto step = [&](bool timed) {
      ++steps;
      auto& b = live[pick(rng)];
      const std::size_t next = draw();
      std::uint64_t t0 = now_ns();
      good = a.deallocate(b.first, b.second, t);
      std::uint64_t t1 = now_ns();
      b.first = good ? a.allocate(next, t) : nullptr;
      b.second = next;
      std::uint64_t t2 = now_ns();
      good = good && b.first != nullptr;
      if (timed) {
        out.push_back(static_cast<std::uint32_t>(std::min<std::uint64_t>(t1 - t0, UINT32_MAX)));
        out.push_back(static_cast<std::uint32_t>(std::min<std::uint64_t>(t2 - t1, UINT32_MAX)));
      }
    };
    for (int i = 0; i < o.warmup * 10 && good; ++i)
      step(false);
    const std::uint64_t end = gate.arrive() + budget_ns;
    while (good && out.size() < o.max_samples_per_thread && now_ns() < end)
      step(true);
    for (auto& b : live)
      if (b.first) a.deallocate(b.first, b.second, t);
    random_steps.fetch_add(steps);
    a.thread_end(t);
    return good;
  });
  cell_result r = summarize(samples);
  r.ops = random_steps.load(); // one free + one allocation each
  r.test = "random";
  r.threads = threads;
  r.failed = !ok;
  return r;
}

inline void write_json(const harness_options& o, const char* allocator, const cell_result& r) {
  std::printf("%-22s %-6s %10zu B %2d thr  mean %8.0f ns  median %8.0f ns  p99 %9.0f ns  (%zu "
              "samples%s)\n",
              o.label.c_str(), r.test.c_str(), r.size, r.threads, r.mean_ns, r.median_ns, r.p99_ns,
              r.samples, r.failed ? ", FAILED" : "");
  std::fflush(stdout);
  if (o.json_path.empty()) return;
  FILE* f = std::fopen(o.json_path.c_str(), "a");
  if (!f) {
    std::fprintf(stderr, "alloc_bench: cannot append to '%s'; results only on stdout\n",
                 o.json_path.c_str());
    return;
  }
  std::fprintf(f,
               "{\"kind\":\"alloc\",\"label\":\"%s\",\"allocator\":\"%s\",\"test\":\"%s\","
               "\"size\":%zu,\"threads\":%d,\"samples\":%zu,\"median_ns\":%.1f,\"p99_ns\":%.1f,"
               "\"mean_ns\":%.1f,\"failed\":%s}\n",
               o.label.c_str(), allocator, r.test.c_str(), r.size, r.threads, r.samples,
               r.median_ns, r.p99_ns, r.mean_ns, r.failed ? "true" : "false");
  std::fclose(f);
}

// When libgmem.so is preloaded, appends its pool counters for device 0 (gmem_stats()) to the
// JSON file: the profile that goes with the timings (cache hits, fences, segment maps).
inline void dump_gmem_stats(const harness_options& o) {
  using stats_fn = gmem_status (*)(int, gmem_stats_t*);
  auto fn = reinterpret_cast<stats_fn>(dlsym(RTLD_DEFAULT, "gmem_stats"));
  if (!fn) return;
  gmem_stats_t s{};
  s.struct_size = sizeof s;
  if (fn(0, &s) != GMEM_OK || !(s.flags & GMEM_STATS_FROM_POOL)) return;
  std::string line = "{\"kind\":\"gmem_stats\",\"label\":\"" + o.label + "\"";
#define GMEM_BENCH_FIELD_(name) line += ",\"" #name "\":" + std::to_string(s.name);
  GMEM_STATS_FIELDS(GMEM_BENCH_FIELD_)
#undef GMEM_BENCH_FIELD_
  line += "}\n";
  std::printf("%s", line.c_str());
  if (FILE* f = o.json_path.empty() ? nullptr : std::fopen(o.json_path.c_str(), "a")) {
    std::fputs(line.c_str(), f);
    std::fclose(f);
  }
}

// ops (optional): adds the pairs made (pair test, warm-up included) and the free+allocate
// steps (random test).
inline void run_suite(allocator_under_test& a, const harness_options& o,
                      std::uint64_t* ops = nullptr, bool gmem_stats = true) {
  const bool pair = o.tests.find("pair") != std::string::npos;
  const bool random = o.tests.find("random") != std::string::npos;
  for (int threads : o.threads) {
    if (pair)
      for (std::size_t size : o.sizes) {
        const cell_result r = run_pair(a, o, size, threads);
        if (ops != nullptr) *ops += r.ops;
        write_json(o, a.name(), r);
      }
    if (random) {
      const cell_result r = run_random(a, o, threads);
      if (ops != nullptr) *ops += r.ops;
      write_json(o, a.name(), r);
    }
  }
  if (gmem_stats) dump_gmem_stats(o);
}

// Parses "--label X --tests pair,random --threads 1,4,16 --sizes 512,1M --seconds 0.25
// --live 1000 --random-sizes 256,64M --json PATH"; unknown arguments are left for the caller
// (returns their indexes).
inline std::vector<std::size_t> parse_list(const char* text) {
  std::vector<std::size_t> out;
  const char* p = text;
  while (*p) {
    char* end = nullptr;
    double v = std::strtod(p, &end);
    if (end == p) break;
    std::size_t mult = 1;
    if (*end == 'K' || *end == 'k')
      mult = 1u << 10, ++end;
    else if (*end == 'M' || *end == 'm')
      mult = 1u << 20, ++end;
    else if (*end == 'G' || *end == 'g')
      mult = std::size_t{1} << 30, ++end;
    out.push_back(static_cast<std::size_t>(v * static_cast<double>(mult)));
    p = (*end == ',') ? end + 1 : end;
  }
  return out;
}

inline std::vector<int> parse_args(harness_options& o, int argc, char** argv) {
  std::vector<int> rest;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--label")
      o.label = next();
    else if (a == "--tests")
      o.tests = next();
    else if (a == "--json")
      o.json_path = next();
    else if (a == "--seconds")
      o.seconds_per_cell = std::atof(next());
    else if (a == "--max-samples")
      o.max_samples_per_thread = std::strtoull(next(), nullptr, 10);
    else if (a == "--sizes")
      o.sizes = parse_list(next());
    else if (a == "--live")
      o.live_blocks = std::max<std::size_t>(1, std::strtoull(next(), nullptr, 10));
    else if (a == "--random-sizes") { // MIN,MAX of the random test
      const std::vector<std::size_t> v = parse_list(next());
      if (v.size() == 2 && v[0] >= 1 && v[0] < v[1]) {
        o.random_min = v[0];
        o.random_max = v[1];
      } else {
        std::fprintf(stderr,
                     "--random-sizes wants MIN,MAX with 1 <= MIN < MAX (e.g. 256,4M); "
                     "keeping %zu,%zu\n",
                     o.random_min, o.random_max);
      }
    } else if (a == "--threads") {
      o.threads.clear();
      for (auto v : parse_list(next()))
        o.threads.push_back(static_cast<int>(v));
    } else
      rest.push_back(i);
  }
  return rest;
}

} // namespace gmem_bench
