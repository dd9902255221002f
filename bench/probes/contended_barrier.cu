// What a context barrier costs while many threads launch (the situation of
// bench/stream_alloc_bench.cu through cudaMalloc at 16 threads), split into its two calls:
//   none         the threads only launch (their fill and check kernels): the floor
//   record+wait  every `every`-th op of a thread, under one mutex (the pool's fences run one at
//                a time): cuCtxRecordEvent + cuCtxWaitEvent, the shim's barrier
//   record       the same with cuCtxRecordEvent alone (no device-side wait)
//   record+query the same, then cuEventQuery on later ops until it completes: how long after a
//                record the work before it is done (what a fence that only records would wait)
// With `vmm` the threads' blocks are pages of one virtual-memory range (cuMemCreate of 16 MiB
// pages mapped back to back, as gmem's arena), with `vmm-fd` the same pages exportable as file
// descriptors (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, as gmem's arena asks for IPC), else
// cudaMalloc's.
// Build: nvcc -O2 -arch=sm_90 -I. -o contended_barrier bench/probes/contended_barrier.cu -lcuda
//   ./contended_barrier [threads 16] [every 42] [seconds 0.5] [vmm|vmm-fd|malloc]
// Prints one JSON line per mode: per-op mean and p99 host ns, ops per ms of all threads, and the
// barrier calls' mean and p99 host ns.
#include "bench/alloc_harness.h"
#include "probe_common.cuh"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using probe::check;

__global__ void fill(unsigned* p, std::size_t words, unsigned tag) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += std::size_t(blockDim.x) * gridDim.x)
    p[i] = tag;
}

__global__ void check_kernel(const unsigned* p, std::size_t words, unsigned tag,
                             unsigned long long* bad) {
  unsigned long long n = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += std::size_t(blockDim.x) * gridDim.x)
    n += p[i] != tag ? 1 : 0;
  if (n != 0) atomicAdd(bad, n);
}

double now_ns() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct stats {
  std::vector<double> ns;
  double mean() const {
    double s = 0;
    for (double v : ns)
      s += v;
    return ns.empty() ? 0 : s / double(ns.size());
  }
  double p99() {
    if (ns.empty()) return 0;
    std::sort(ns.begin(), ns.end());
    return ns[ns.size() * 99 / 100];
  }
};

} // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 16;
  const int every = argc > 2 ? std::atoi(argv[2]) : 42;
  const double seconds = argc > 3 ? std::atof(argv[3]) : 0.5;
  const std::string memory = argc > 4 ? argv[4] : "malloc";
  const bool vmm = memory == "vmm" || memory == "vmm-fd";
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  if (cudaFree(nullptr) != cudaSuccess) return 1;
  const probe::context_event_calls calls;
  const probe::ctx_event_fn ctx_record = calls.record, ctx_wait = calls.wait;
  if (ctx_record == nullptr) {
    std::printf("# no context barrier in this driver\n");
    return 0;
  }
  CUcontext ctx = nullptr;
  check(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  unsigned long long* bad = nullptr;
  cudaMalloc(&bad, sizeof *bad);
  const std::size_t max_bytes = std::size_t{4} << 20;
  CUdeviceptr range = 0; // vmm: every thread's blocks, back to back
  if (vmm) {
    const std::size_t page = std::size_t{16} << 20,
                      total = (static_cast<std::size_t>(threads) * 8 * max_bytes + page - 1) /
                              page * page;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    if (memory == "vmm-fd") prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    check(cuMemAddressReserve(&range, total, page, 0, 0), "cuMemAddressReserve");
    for (std::size_t off = 0; off < total; off += page) {
      CUmemGenericAllocationHandle h = 0;
      check(cuMemCreate(&h, page, &prop, 0), "cuMemCreate");
      check(cuMemMap(range + off, page, 0, h, 0), "cuMemMap");
    }
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    check(cuMemSetAccess(range, total, &access, 1), "cuMemSetAccess");
  }
  std::printf("# blocks from %s\n", memory == "vmm-fd" ? "one VMM range (16 MiB pages, fd handles)"
                                    : vmm              ? "one VMM range (16 MiB pages)"
                                                       : "cudaMalloc");

  for (const char* mode : {"none", "record+wait", "record", "record+query", "none"}) {
    const std::string m = mode;
    std::mutex fence_mu;
    std::vector<stats> ops(static_cast<std::size_t>(threads)),
        fences(static_cast<std::size_t>(threads)), lags(static_cast<std::size_t>(threads));
    std::atomic<long long> total{0};
    std::atomic<double> first{0}, last{0};
    gmem_bench::start_gate gate(threads); // the timed phases start together, after every setup
    std::vector<std::thread> ts;
    for (int i = 0; i < threads; ++i)
      ts.emplace_back([&, i] {
        check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
        cudaStream_t s = nullptr;
        cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
        std::vector<unsigned*> ring(8);
        for (std::size_t k = 0; k < ring.size(); ++k) {
          if (vmm)
            ring[k] = reinterpret_cast<unsigned*>(
                range + (static_cast<std::size_t>(i) * ring.size() + k) * max_bytes);
          else
            cudaMalloc(&ring[k], max_bytes);
        }
        CUevent ev = nullptr;
        check(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
        bool outstanding = false;
        double recorded_at = 0;
        std::mt19937_64 rng(0x51ed2701u + static_cast<std::uint64_t>(i));
        std::uniform_real_distribution<double> u(std::log(256.0), std::log(double(max_bytes)));
        cudaStreamSynchronize(s);
        const double start = static_cast<double>(gate.arrive()), end = start + seconds * 1e9;
        double now = start;
        unsigned tag = static_cast<unsigned>(i) << 24;
        long long n = 0;
        auto& st = ops[static_cast<std::size_t>(i)];
        while (now < end) {
          const std::size_t bytes = static_cast<std::size_t>(std::exp(u(rng)));
          const double t0 = now_ns();
          if (outstanding && cuEventQuery(ev) == CUDA_SUCCESS) {
            lags[static_cast<std::size_t>(i)].ns.push_back(now_ns() - recorded_at);
            outstanding = false;
          }
          if (m != "none" && ++n % every == 0 && !outstanding) {
            std::lock_guard lock(fence_mu);
            const double f0 = now_ns();
            check(ctx_record(ctx, ev), "cuCtxRecordEvent");
            if (m == "record+wait") check(ctx_wait(ctx, ev), "cuCtxWaitEvent");
            const double f1 = now_ns();
            fences[static_cast<std::size_t>(i)].ns.push_back(f1 - f0);
            if (m == "record+query") {
              outstanding = true;
              recorded_at = f1;
            }
          }
          const std::size_t words = std::max<std::size_t>(1, bytes / sizeof(unsigned));
          const unsigned grid =
              static_cast<unsigned>(std::min<std::size_t>((words + 255) / 256, 512));
          unsigned* w = ring[static_cast<std::size_t>(n) % ring.size()];
          fill<<<grid, 256, 0, s>>>(w, words, ++tag);
          check_kernel<<<grid, 256, 0, s>>>(w, words, tag, bad);
          now = now_ns();
          st.ns.push_back(now - t0);
        }
        cudaStreamSynchronize(s);
        const double done = now_ns();
        total += static_cast<long long>(st.ns.size());
        first.store(start); // the gate's: the same for every thread
        double l = last.load();
        while (done > l && !last.compare_exchange_weak(l, done)) {
        }
        cuEventDestroy(ev);
        if (!vmm)
          for (auto* p : ring)
            cudaFree(p);
        cudaStreamDestroy(s);
      });
    for (auto& t : ts)
      t.join();
    stats all, f, lag;
    for (auto& o : ops)
      all.ns.insert(all.ns.end(), o.ns.begin(), o.ns.end());
    for (auto& o : fences)
      f.ns.insert(f.ns.end(), o.ns.begin(), o.ns.end());
    for (auto& o : lags)
      lag.ns.insert(lag.ns.end(), o.ns.begin(), o.ns.end());
    const double wall_ms = (last.load() - first.load()) / 1e6;
    std::printf("{\"kind\":\"contended_barrier\",\"mode\":\"%s\",\"threads\":%d,\"every\":%d,"
                "\"op_mean_ns\":%.0f,\"op_p99_ns\":%.0f,\"ops_per_ms\":%.1f,\"barriers\":%zu,"
                "\"barrier_mean_ns\":%.0f,\"barrier_p99_ns\":%.0f,\"lag_n\":%zu,"
                "\"lag_mean_ns\":%.0f,\"lag_p99_ns\":%.0f}\n",
                mode, threads, every, all.mean(), all.p99(), double(total.load()) / wall_ms,
                f.ns.size(), f.mean(), f.p99(), lag.ns.size(), lag.mean(), lag.p99());
  }
  cudaFree(bad);
  return 0;
}
