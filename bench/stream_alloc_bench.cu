// Allocation cost with kernels in flight, against the launch floor (docs/design.md "Anchors").
//   stream_alloc_bench --method floor|cudaMallocAsync|cudaMalloc|cub [--threads 1,4,16]
//                      [--seconds 1] [--live 8] [--random-sizes 256,4M] [--inflight 0]
//                      [--check-delay-us 0] [--label X] [--json F]
// Each thread has a non-blocking stream of its own and keeps `live` blocks; one op frees its
// oldest block, allocates a new one of a log-uniform random size and launches a fill and a
// check kernel on it (the check counts words that are not what this op's fill wrote). The
// floor is the same program on blocks of the largest size allocated up front, its kernels
// covering the size drawn: no allocation in the loop, so an allocator's cost is its time per
// op above the floor's.
// --inflight N bounds each thread's ops in flight, as a program that waits for its results
// does: before its launches an op waits for the event recorded after the op N earlier (the
// wait is part of the op's time). With 0 (the default) a thread launches as fast as its host
// allows, held back only by the driver's launch queue; the drain printed (the longest final
// stream synchronization after the timed loop) shows how far a host ran ahead of its device.
// --check-delay-us N makes every check kernel wait N us on the device before it reads, as a
// slow reader of the block: the window in which a block handed to another stream too early is
// seen grows from the check's own few microseconds to N (a hazard test, not a benchmark).
// Every thread sets itself up (its stream, first blocks and a warm-up) before the threads'
// timed phases start together (gmem_bench::start_gate) and end at one deadline.
// Run under LD_PRELOAD=libgmem.so (with --method cudaMallocAsync or cudaMalloc) for gmem.
// Prints mean and p99 host time per op and ops per ms of all threads together, and the mean
// and p99 of the op's free and allocation calls alone (the rest is the two launches); exit 3 when a
// check kernel saw another op's data (a block handed out while old work could still touch
// it), so the run doubles as a multi-thread reuse-hazard test.
#include "alloc_harness.h"

#include <cub/util_allocator.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

__global__ void fill(unsigned* p, std::size_t words, unsigned tag) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += std::size_t(blockDim.x) * gridDim.x)
    p[i] = tag;
}

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void check(const unsigned* p, std::size_t words, unsigned tag, unsigned long long* bad,
                      unsigned long long delay_ns) {
  if (delay_ns != 0) {
    const unsigned long long t0 = global_ns();
    while (global_ns() - t0 < delay_ns) {
    }
  }
  unsigned long long n = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += std::size_t(blockDim.x) * gridDim.x)
    n += p[i] != tag ? 1 : 0;
  if (n != 0) atomicAdd(bad, n);
}

enum class method { floor, async, sync, cub };

struct config {
  method m = method::async;
  std::string label;
  std::vector<int> threads{1, 4, 16};
  double seconds = 1.0;
  std::size_t live = 8, min_bytes = 256, max_bytes = std::size_t{4} << 20;
  std::size_t inflight = 0; // ops in flight per thread; 0 = unbounded
  unsigned long long check_delay_ns = 0;
  std::string json;
};

struct thread_state {
  cudaStream_t stream = nullptr;
  std::vector<std::pair<void*, std::size_t>> ring; // (block, bytes), oldest at `next`
  std::size_t next = 0;
  std::vector<std::uint32_t> samples, free_samples, alloc_samples; // per op: all, free, alloc
  std::vector<cudaEvent_t> done; // --inflight: the event after each of the last N ops
  std::size_t ops = 0;
  std::uint64_t drain_ns = 0; // the final stream synchronization after the timed loop
  bool ok = true;
};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "stream_alloc_bench: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

class runner {
public:
  runner(const config& c) : c_(c), cub_(2, 9, 28, std::size_t{64} << 30, true) {
    ok(cudaMalloc(&bad_, sizeof *bad_), "cudaMalloc(counter)");
    ok(cudaMemset(bad_, 0, sizeof *bad_), "cudaMemset(counter)");
  }
  unsigned long long mismatches() {
    unsigned long long n = 0;
    ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    ok(cudaMemcpy(&n, bad_, sizeof n, cudaMemcpyDeviceToHost), "cudaMemcpy(counter)");
    return n;
  }
  void* allocate(thread_state& t, std::size_t bytes) {
    void* p = nullptr;
    cudaError_t e = cudaSuccess;
    switch (c_.m) {
    case method::floor:
    case method::sync:
      e = cudaMalloc(&p, bytes);
      break;
    case method::async:
      e = cudaMallocAsync(&p, bytes, t.stream);
      break;
    case method::cub:
      e = cub_.DeviceAllocate(&p, bytes, t.stream);
      break;
    }
    return ok(e, "allocate") ? p : nullptr;
  }
  bool release(thread_state& t, void* p) {
    switch (c_.m) {
    case method::floor:
    case method::sync:
      return ok(cudaFree(p), "cudaFree");
    case method::async:
      return ok(cudaFreeAsync(p, t.stream), "cudaFreeAsync");
    case method::cub:
      return ok(cub_.DeviceFree(p), "DeviceFree");
    }
    return false;
  }
  // One op: [free the oldest, allocate a new size,] fill, check.
  bool op(thread_state& t, std::size_t bytes, unsigned tag) {
    cudaEvent_t* done = t.done.empty() ? nullptr : &t.done[t.ops % t.done.size()];
    ++t.ops;
    if (done != nullptr && !ok(cudaEventSynchronize(*done), "cudaEventSynchronize")) return false;
    auto& slot = t.ring[t.next];
    t.next = (t.next + 1) % t.ring.size();
    if (c_.m != method::floor) {
      const std::uint64_t t0 = gmem_bench::now_ns();
      if (!release(t, slot.first)) return false;
      const std::uint64_t t1 = gmem_bench::now_ns();
      slot = {allocate(t, bytes), bytes};
      if (slot.first == nullptr) return false;
      t.free_samples.push_back(clamp32(t1 - t0));
      t.alloc_samples.push_back(clamp32(gmem_bench::now_ns() - t1));
    }
    // The floor's kernels cover the size drawn, as an allocator's do: the same device work.
    const std::size_t kernel_bytes = c_.m == method::floor ? bytes : slot.second;
    const std::size_t words = std::max<std::size_t>(1, kernel_bytes / sizeof(unsigned));
    const unsigned grid = static_cast<unsigned>(std::min<std::size_t>((words + 255) / 256, 512));
    auto* w = static_cast<unsigned*>(slot.first);
    fill<<<grid, 256, 0, t.stream>>>(w, words, tag);
    check<<<grid, 256, 0, t.stream>>>(w, words, tag, bad_, c_.check_delay_ns);
    if (done != nullptr && !ok(cudaEventRecord(*done, t.stream), "cudaEventRecord")) return false;
    return ok(cudaGetLastError(), "kernel launch");
  }
  static std::uint32_t clamp32(std::uint64_t ns) {
    return static_cast<std::uint32_t>(std::min<std::uint64_t>(ns, UINT32_MAX));
  }
  // The op's free and allocation calls alone, over all threads: mean and p99 (0 for the floor).
  struct split {
    double free_mean = 0, free_p99 = 0, alloc_mean = 0, alloc_p99 = 0;
    double drain_ms = 0; // the longest drain of any thread
  };
  gmem_bench::cell_result run(int threads, double& ops_per_ms, split& calls) {
    std::vector<thread_state> ts(static_cast<std::size_t>(threads));
    const auto budget = static_cast<std::uint64_t>(c_.seconds * 1e9);
    std::atomic<std::uint64_t> total_ops{0}, first{0}, last{0};
    gmem_bench::start_gate gate(threads);
    const bool all_ok = gmem_bench::run_threads(threads, [&](int i) {
      thread_state& t = ts[static_cast<std::size_t>(i)];
      std::mt19937_64 rng(0x51ed2701u + static_cast<std::uint64_t>(i));
      std::uniform_real_distribution<double> u(std::log(double(c_.min_bytes)),
                                               std::log(double(c_.max_bytes)));
      auto draw = [&] { return static_cast<std::size_t>(std::exp(u(rng))); };
      unsigned tag = static_cast<unsigned>(i) << 24;
      auto set_up = [&] { // the stream, the events, the first blocks, a warm-up
        if (!ok(cudaStreamCreateWithFlags(&t.stream, cudaStreamNonBlocking), "stream create"))
          return false;
        t.done.resize(c_.inflight);
        for (auto& e : t.done) // recorded once, so the first N ops' waits return at once
          if (!ok(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "event create") ||
              !ok(cudaEventRecord(e, t.stream), "cudaEventRecord"))
            return false;
        t.ring.resize(c_.live);
        for (auto& b : t.ring) {
          b.second = c_.m == method::floor ? c_.max_bytes : draw();
          b.first = allocate(t, b.second); // the floor's blocks: up front, largest size
          if (b.first == nullptr) return false;
        }
        bool good = true;
        for (int w = 0; w < 50 && good; ++w)
          good = op(t, draw(), ++tag);
        return good && ok(cudaStreamSynchronize(t.stream), "warm-up sync");
      };
      t.ok = set_up();
      t.samples.reserve(200000);
      t.free_samples.clear();
      t.alloc_samples.clear();
      const std::uint64_t start = gate.arrive(), end = start + budget;
      std::uint64_t now = start;
      while (t.ok && now < end && t.samples.size() < 2000000) {
        const std::size_t bytes = draw();
        const std::uint64_t t0 = gmem_bench::now_ns();
        t.ok = op(t, bytes, ++tag);
        now = gmem_bench::now_ns();
        t.samples.push_back(clamp32(now - t0));
      }
      const std::uint64_t loop_end = gmem_bench::now_ns();
      t.ok = t.ok && ok(cudaStreamSynchronize(t.stream), "stream sync");
      const std::uint64_t done = gmem_bench::now_ns();
      t.drain_ns = done - loop_end;
      total_ops.fetch_add(t.samples.size());
      first.store(start); // the gate's: the same for every thread
      std::uint64_t l = last.load();
      while (done > l && !last.compare_exchange_weak(l, done)) {
      }
      for (auto& b : t.ring)
        if (b.first != nullptr) t.ok = release(t, b.first) && t.ok;
      if (t.stream != nullptr) t.ok = ok(cudaStreamSynchronize(t.stream), "stream sync") && t.ok;
      for (auto e : t.done)
        if (e != nullptr) cudaEventDestroy(e);
      if (t.stream != nullptr) cudaStreamDestroy(t.stream);
      return t.ok;
    });
    std::vector<std::vector<std::uint32_t>> samples, frees, allocs;
    for (auto& t : ts) {
      calls.drain_ms = std::max(calls.drain_ms, double(t.drain_ns) / 1e6);
      samples.push_back(std::move(t.samples));
      frees.push_back(std::move(t.free_samples));
      allocs.push_back(std::move(t.alloc_samples));
    }
    gmem_bench::cell_result r = gmem_bench::summarize(samples);
    if (c_.m != method::floor) {
      const gmem_bench::cell_result f = gmem_bench::summarize(frees),
                                    a = gmem_bench::summarize(allocs);
      calls.free_mean = f.mean_ns;
      calls.free_p99 = f.p99_ns;
      calls.alloc_mean = a.mean_ns;
      calls.alloc_p99 = a.p99_ns;
    }
    r.test = "stream";
    r.threads = threads;
    r.failed = !all_ok;
    const double wall_ms = double(last.load() - first.load()) / 1e6;
    ops_per_ms = wall_ms > 0 ? double(total_ops.load()) / wall_ms : 0;
    return r;
  }

private:
  const config& c_;
  cub::CachingDeviceAllocator cub_;
  unsigned long long* bad_ = nullptr;
};

bool parse(config& c, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    if (v == nullptr) {
      std::fprintf(stderr, "stream_alloc_bench: %s needs a value\n", a.c_str());
      return false;
    }
    ++i;
    if (a == "--method") {
      const std::string m = v;
      if (m == "floor")
        c.m = method::floor;
      else if (m == "cudaMallocAsync")
        c.m = method::async;
      else if (m == "cudaMalloc")
        c.m = method::sync;
      else if (m == "cub")
        c.m = method::cub;
      else {
        std::fprintf(stderr,
                     "stream_alloc_bench: unknown --method '%s' (floor, cudaMallocAsync, "
                     "cudaMalloc, cub)\n",
                     v);
        return false;
      }
    } else if (a == "--threads") {
      c.threads.clear();
      for (auto n : gmem_bench::parse_list(v))
        if (n >= 1 && n <= 64) c.threads.push_back(static_cast<int>(n));
    } else if (a == "--seconds") {
      c.seconds = std::atof(v);
    } else if (a == "--live") {
      c.live = std::max<std::size_t>(1, std::strtoull(v, nullptr, 10));
    } else if (a == "--random-sizes") {
      const auto s = gmem_bench::parse_list(v);
      if (s.size() != 2 || s[0] < 4 || s[0] >= s[1]) {
        std::fprintf(stderr, "stream_alloc_bench: --random-sizes wants MIN,MAX (MIN >= 4)\n");
        return false;
      }
      c.min_bytes = s[0];
      c.max_bytes = s[1];
    } else if (a == "--inflight") {
      c.inflight = std::strtoull(v, nullptr, 10);
    } else if (a == "--check-delay-us") {
      c.check_delay_ns = std::strtoull(v, nullptr, 10) * 1000ull;
    } else if (a == "--label") {
      c.label = v;
    } else if (a == "--json") {
      c.json = v;
    } else {
      std::fprintf(stderr, "stream_alloc_bench: unknown option '%s'\n", a.c_str());
      return false;
    }
  }
  if (c.threads.empty() || !(c.seconds > 0)) {
    std::fprintf(stderr, "stream_alloc_bench: --threads wants 1..64, --seconds > 0\n");
    return false;
  }
  return true;
}

} // namespace

int main(int argc, char** argv) {
  config c;
  if (!parse(c, argc, argv)) return 2;
  if (cudaFree(nullptr) != cudaSuccess) {
    std::fprintf(stderr, "stream_alloc_bench: no usable CUDA device; nothing measured\n");
    return 2;
  }
  if (c.label.empty()) c.label = c.m == method::floor ? "floor" : "alloc";
  cudaMemPool_t pool;
  if (cudaDeviceGetDefaultMemPool(&pool, 0) == cudaSuccess) {
    std::uint64_t keep = UINT64_MAX; // cudaMallocAsync keeps what it cached
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
  }
  runner r(c);
  bool failed = false;
  for (int threads : c.threads) {
    double per_ms = 0;
    runner::split calls;
    const gmem_bench::cell_result cell = r.run(threads, per_ms, calls);
    failed = failed || cell.failed;
    std::printf("%-22s stream %2d thr  mean %8.0f ns/op  p99 %9.0f ns  %8.1f ops/ms all threads  "
                "drain %.1f ms (%zu ops%s)\n",
                c.label.c_str(), threads, cell.mean_ns, cell.p99_ns, per_ms, calls.drain_ms,
                cell.samples, cell.failed ? ", FAILED" : "");
    if (c.m != method::floor)
      std::printf("%-22s   free mean %8.0f p99 %9.0f ns   alloc mean %8.0f p99 %9.0f ns\n",
                  c.label.c_str(), calls.free_mean, calls.free_p99, calls.alloc_mean,
                  calls.alloc_p99);
    std::fflush(stdout);
    if (FILE* f = c.json.empty() ? nullptr : std::fopen(c.json.c_str(), "a")) {
      std::fprintf(f,
                   "{\"kind\":\"stream_alloc\",\"label\":\"%s\",\"threads\":%d,\"samples\":%zu,"
                   "\"mean_ns\":%.1f,\"median_ns\":%.1f,\"p99_ns\":%.1f,\"ops_per_ms\":%.2f,"
                   "\"free_mean_ns\":%.1f,\"free_p99_ns\":%.1f,\"alloc_mean_ns\":%.1f,"
                   "\"alloc_p99_ns\":%.1f,\"inflight\":%zu,\"drain_ms\":%.2f,\"failed\":%s}\n",
                   c.label.c_str(), threads, cell.samples, cell.mean_ns, cell.median_ns,
                   cell.p99_ns, per_ms, calls.free_mean, calls.free_p99, calls.alloc_mean,
                   calls.alloc_p99, c.inflight, calls.drain_ms, cell.failed ? "true" : "false");
      std::fclose(f);
    }
  }
  const unsigned long long bad = r.mismatches();
  std::printf("%-22s mismatches=%llu\n", c.label.c_str(), bad);
  if (bad != 0) return 3;
  return failed ? 1 : 0;
}
