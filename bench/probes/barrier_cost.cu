// What a device-side barrier costs the host while the GPU runs behind (a ~200 ms kernel on the
// legacy stream), built each way the shim could (interpose/upstream/stream_registry.h), next to the
// launch floor (an empty kernel's launch):
//   context  cuCtxRecordEvent + cuCtxWaitEvent (CUDA 12.5 drivers): two calls, any number of
//            streams. The shim's barrier while no graph capture is open.
//   events   the shim's fallback, the fan-out: per stream an event recorded on it and waited
//            for by the legacy stream, a hub event on the legacy stream, and per stream a wait
//            for the hub: 3N + 1 driver calls.
//   memops   stream memory operations: per stream a write {flag[s] = gen}, then one batch on the
//            legacy stream {wait until flag[s] >= gen for every s; write hub = gen}, then per
//            stream a wait {hub >= gen}: 2N + 1 driver calls. Flags in device memory or in
//            mapped pinned host memory. Rejected: it blocks the host until the kernel ends.
// After each series the host synchronizes and checks that a kernel issued after the barriers
// on every stream (for the context barrier also on a stream created after them) started only
// after the legacy stream's kernel ended (a line "UNSAFE" otherwise).
// Build: nvcc -O2 -arch=sm_90 -o barrier_cost bench/probes/barrier_cost.cu -lcuda
//   ./barrier_cost [streams 32] [barriers 200]
// Prints one JSON line per series: mean, p50 and p99 host nanoseconds per barrier.
// Measured figures: bench/results/README.md; why the memops form was rejected: docs/pool.md.
#include "probe_common.cuh"

#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

using probe::check;
using probe::spin;

__global__ void stamp(unsigned long long* at) {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  *at = t;
}

double now_ns() {
  return std::chrono::duration<double, std::nano>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct series {
  const char* name;
  std::vector<double> ns;
  void print(int streams) {
    std::sort(ns.begin(), ns.end());
    double sum = 0;
    for (double v : ns)
      sum += v;
    std::printf("{\"kind\":\"barrier_cost\",\"mode\":\"%s\",\"streams\":%d,\"barriers\":%zu,"
                "\"mean_ns\":%.0f,\"p50_ns\":%.0f,\"p99_ns\":%.0f}\n",
                name, streams, ns.size(), sum / double(ns.size()), ns[ns.size() / 2],
                ns[ns.size() * 99 / 100]);
  }
};

} // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 32;
  const int iters = argc > 2 ? std::atoi(argv[2]) : 200;
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  if (cudaFree(nullptr) != cudaSuccess) return 1;
  CUdevice dev = 0;
  check(cuCtxGetDevice(&dev), "cuCtxGetDevice");
  int clock_khz = 0;
  check(cuDeviceGetAttribute(&clock_khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev), "clock rate");
  int memops = 0;
  (void)cuDeviceGetAttribute(&memops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev);
  std::printf("# streams %d, barriers %d, wait-value-nor attribute %d\n", n, iters, memops);
  const long long cycles = static_cast<long long>(clock_khz) * 1000 / 5; // ~200 ms

  std::vector<CUstream> s(static_cast<size_t>(n));
  std::vector<CUevent> ev(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    check(cuStreamCreate(&s[i], CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING), "cuEventCreate");
  }
  CUevent hub = nullptr;
  check(cuEventCreate(&hub, CU_EVENT_DISABLE_TIMING), "cuEventCreate");

  // Flags: [0, n) per stream, n the hub. Device memory and mapped pinned host memory.
  CUdeviceptr dflags = 0;
  check(cuMemAlloc(&dflags, sizeof(unsigned) * (n + 1)), "cuMemAlloc");
  check(cuMemsetD32(dflags, 0, static_cast<size_t>(n + 1)), "cuMemsetD32");
  void* hflags_host = nullptr;
  check(cuMemHostAlloc(&hflags_host, sizeof(unsigned) * (n + 1), CU_MEMHOSTALLOC_DEVICEMAP),
        "cuMemHostAlloc");
  std::fill_n(static_cast<volatile unsigned*>(hflags_host), n + 1, 0u);
  CUdeviceptr hflags = 0;
  check(cuMemHostGetDevicePointer(&hflags, hflags_host, 0), "cuMemHostGetDevicePointer");

  unsigned long long* stamps = nullptr; // [0] end of the legacy kernel, [1..n] the streams',
                                        // [n+1] a stream created after the barriers
  cudaMalloc(&stamps, sizeof(unsigned long long) * (n + 2));

  // Each series: a ~200 ms kernel on the legacy stream, `iters` barriers timed on the host,
  // then one stamp kernel per stream; all must start after the legacy kernel (and its stamp).
  // later_covered: the barrier itself orders a stream created after it (the context barrier
  // does; the fan-out needs the shim's stream-creation hook, which this probe does not have).
  auto run = [&](series& out, auto&& barrier, bool later_covered = false) {
    spin<<<1, 1>>>(cycles);
    stamp<<<1, 1>>>(stamps);
    for (int k = 1; k <= iters; ++k) {
      const double t0 = now_ns();
      barrier(static_cast<unsigned>(k));
      out.ns.push_back(now_ns() - t0);
    }
    for (int i = 0; i < n; ++i)
      stamp<<<1, 1, 0, reinterpret_cast<cudaStream_t>(s[i])>>>(stamps + 1 + i);
    CUstream later = nullptr;
    check(cuStreamCreate(&later, CU_STREAM_NON_BLOCKING), "cuStreamCreate later");
    stamp<<<1, 1, 0, reinterpret_cast<cudaStream_t>(later)>>>(stamps + 1 + n);
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    check(cuStreamDestroy(later), "cuStreamDestroy");
    std::vector<unsigned long long> t(static_cast<size_t>(n + 2));
    cudaMemcpy(t.data(), stamps, sizeof(unsigned long long) * (n + 2), cudaMemcpyDeviceToHost);
    int early = 0;
    for (int i = 1; i <= (later_covered ? n + 1 : n); ++i)
      early += t[i] < t[0];
    if (early != 0)
      std::printf("# %s: %d streams ran before the barrier (UNSAFE)\n", out.name, early);
    out.print(n);
  };

  const probe::context_event_calls calls;
  const probe::ctx_event_fn ctx_record = calls.record, ctx_wait = calls.wait;
  CUcontext ctx = nullptr;
  check(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx_record != nullptr && ctx_wait != nullptr) {
    CUevent whole = nullptr;
    check(cuEventCreate(&whole, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
    series context{"context", {}};
    run(
        context,
        [&](unsigned) {
          check(ctx_record(ctx, whole), "cuCtxRecordEvent");
          check(ctx_wait(ctx, whole), "cuCtxWaitEvent");
        },
        true);
  } else {
    std::printf("# no context barrier in this driver (cuCtxRecordEvent at 12050)\n");
  }

  series events{"events", {}};
  run(events, [&](unsigned) {
    for (int i = 0; i < n; ++i) {
      check(cuEventRecord(ev[i], s[i]), "cuEventRecord");
      check(cuStreamWaitEvent(CU_STREAM_LEGACY, ev[i], 0), "cuStreamWaitEvent");
    }
    check(cuEventRecord(hub, CU_STREAM_LEGACY), "cuEventRecord hub");
    for (int i = 0; i < n; ++i)
      check(cuStreamWaitEvent(s[i], hub, 0), "cuStreamWaitEvent hub");
  });

  auto memop_barrier = [&](CUdeviceptr flags) {
    return [&, flags](unsigned gen) {
      // Every stream's write before any stream's wait: streams share the device's hardware
      // queues (CUDA_DEVICE_MAX_CONNECTIONS), so a wait queued ahead of another stream's write
      // on the same queue would hold that write back, and the hub would wait for it forever.
      for (int i = 0; i < n; ++i)
        check(cuStreamWriteValue32(s[i], flags + sizeof(unsigned) * i, gen, 0), "write");
      std::vector<CUstreamBatchMemOpParams> hub_ops(static_cast<size_t>(n + 1));
      for (int i = 0; i < n; ++i) {
        hub_ops[i] = {};
        hub_ops[i].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
        hub_ops[i].waitValue.address = flags + sizeof(unsigned) * i;
        hub_ops[i].waitValue.value = gen;
        hub_ops[i].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
      }
      hub_ops[n] = {};
      hub_ops[n].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
      hub_ops[n].writeValue.address = flags + sizeof(unsigned) * n;
      hub_ops[n].writeValue.value = gen;
      check(cuStreamBatchMemOp(CU_STREAM_LEGACY, static_cast<unsigned>(n + 1), hub_ops.data(), 0),
            "cuStreamBatchMemOp hub");
      for (int i = 0; i < n; ++i)
        check(
            cuStreamWaitValue32(s[i], flags + sizeof(unsigned) * n, gen, CU_STREAM_WAIT_VALUE_GEQ),
            "wait");
    };
  };
  series mdev{"memops-device", {}};
  run(mdev, memop_barrier(dflags));
  series mhost{"memops-host", {}};
  run(mhost, memop_barrier(hflags));
  const unsigned hub_host = static_cast<volatile unsigned*>(hflags_host)[n];

  // Separate calls instead of batches (cuStreamWriteValue32 / cuStreamWaitValue32).
  series single{"memops-single-calls", {}};
  CUdeviceptr sflags = dflags;
  check(cuCtxSynchronize(), "sync");
  check(cuMemsetD32(sflags, 0, static_cast<size_t>(n + 1)), "cuMemsetD32");
  run(single, [&](unsigned gen) {
    for (int i = 0; i < n; ++i)
      check(cuStreamWriteValue32(s[i], sflags + sizeof(unsigned) * i, gen, 0), "write");
    for (int i = 0; i < n; ++i)
      check(cuStreamWaitValue32(CU_STREAM_LEGACY, sflags + sizeof(unsigned) * i, gen,
                                CU_STREAM_WAIT_VALUE_GEQ),
            "wait hub");
    check(cuStreamWriteValue32(CU_STREAM_LEGACY, sflags + sizeof(unsigned) * n, gen, 0),
          "write hub");
    for (int i = 0; i < n; ++i)
      check(cuStreamWaitValue32(s[i], sflags + sizeof(unsigned) * n, gen, CU_STREAM_WAIT_VALUE_GEQ),
            "wait");
  });

  // The launch floor: an empty kernel's launch on the legacy stream, GPU idle.
  series launch{"launch-empty-kernel", {}};
  for (int k = 1; k <= iters; ++k) {
    double t0 = now_ns();
    spin<<<1, 1>>>(0);
    launch.ns.push_back(now_ns() - t0);
  }
  check(cuCtxSynchronize(), "sync");
  launch.print(0);

  // One call of each kind on an idle stream, for scale.
  series rec{"one-event-record-idle", {}};
  for (int k = 1; k <= iters; ++k) {
    double t0 = now_ns();
    check(cuEventRecord(ev[0], s[0]), "cuEventRecord");
    rec.ns.push_back(now_ns() - t0);
  }
  check(cuCtxSynchronize(), "sync");
  rec.print(1);
  std::printf("# host-flag hub after the memops-host series: %u (expected %d)\n", hub_host, iters);
  return 0;
}
