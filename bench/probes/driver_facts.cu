// Driver facts the pool's design rests on, measured on the GPU (not a benchmark of gmem):
//  1. legacy-stream implicit synchronization, which fences::barrier() relies on: does an event
//     recorded on CU_STREAM_LEGACY wait for a kernel running on a blocking stream, on the
//     per-thread default stream, on a non-blocking stream?
//  2. which memory calls block the host behind a running kernel on an unrelated stream
//     (cuMemFree does, docs/design.md "Reuse safety"), and what the virtual-memory calls cost.
// Build: nvcc -O2 -arch=sm_90 -o driver_facts bench/probes/driver_facts.cu -lcuda
#include "probe_common.cuh"

#include <cuda.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

using probe::check;
using probe::spin;

double now_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

long long g_cycles = 0; // ~200 ms of spinning

void busy(CUstream s) {
  spin<<<1, 1, 0, reinterpret_cast<cudaStream_t>(s)>>>(g_cycles);
}

const char* ready(CUevent e) {
  return cuEventQuery(e) == CUDA_SUCCESS ? "complete" : "NOT complete";
}

// Times f() in microseconds, idle and behind a 200 ms kernel on a non-blocking stream.
template <typename F> void timed(const char* what, CUstream nb, F f) {
  check(cuCtxSynchronize(), "sync");
  double t0 = now_us();
  f();
  double idle = now_us() - t0;
  busy(nb);
  t0 = now_us();
  f();
  double behind = now_us() - t0;
  check(cuCtxSynchronize(), "sync");
  std::printf("%-52s idle %9.1f us   behind a 200 ms kernel %9.1f us\n", what, idle, behind);
}

} // namespace

int main() {
  check(cuInit(0), "cuInit");
  cudaFree(nullptr); // primary context current
  CUcontext ctx;
  check(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  int khz = 0;
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, 0);
  g_cycles = static_cast<long long>(khz) * 200; // 200 ms at the base clock (longer at boost: fine)
  CUstream blocking, blocking2, nonblocking;
  check(cuStreamCreate(&blocking, CU_STREAM_DEFAULT), "stream");
  check(cuStreamCreate(&blocking2, CU_STREAM_DEFAULT), "stream");
  check(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING), "stream");
  CUevent e1, e2;
  check(cuEventCreate(&e1, CU_EVENT_DISABLE_TIMING), "event");
  check(cuEventCreate(&e2, CU_EVENT_DISABLE_TIMING), "event");

  std::printf("== 1. legacy-stream implicit synchronization (queried 1 ms after the record)\n");
  struct {
    const char* name;
    CUstream s;
  } cases[] = {{"blocking stream", blocking},
               {"per-thread default stream", CU_STREAM_PER_THREAD},
               {"non-blocking stream", nonblocking}};
  for (auto& c : cases) {
    check(cuCtxSynchronize(), "sync");
    busy(c.s);
    check(cuEventRecord(e1, CU_STREAM_LEGACY), "record legacy");
    // A tiny op on another blocking stream after the legacy record: ordered after it?
    check(cuEventRecord(e2, blocking2), "record blocking2");
    const double t0 = now_us();
    while (now_us() - t0 < 1000) {
    }
    std::printf("kernel on %-28s legacy event %-13s later event on another blocking stream %s\n",
                c.name, ready(e1), ready(e2));
    check(cuCtxSynchronize(), "sync");
  }
  {
    // The barrier's hub: legacy waits for the non-blocking stream's event, then every
    // non-blocking stream waits for the hub.
    check(cuCtxSynchronize(), "sync");
    busy(nonblocking);
    CUevent enb, hub, after;
    check(cuEventCreate(&enb, CU_EVENT_DISABLE_TIMING), "event");
    check(cuEventCreate(&hub, CU_EVENT_DISABLE_TIMING), "event");
    check(cuEventCreate(&after, CU_EVENT_DISABLE_TIMING), "event");
    CUstream nb2;
    check(cuStreamCreate(&nb2, CU_STREAM_NON_BLOCKING), "stream");
    const double t0 = now_us();
    check(cuEventRecord(enb, nonblocking), "record");
    check(cuStreamWaitEvent(CU_STREAM_LEGACY, enb, 0), "wait");
    check(cuEventRecord(hub, CU_STREAM_LEGACY), "record");
    check(cuStreamWaitEvent(nb2, hub, 0), "wait");
    const double cost = now_us() - t0;
    check(cuEventRecord(after, nb2), "record");
    const double t1 = now_us();
    while (now_us() - t1 < 1000) {
    }
    std::printf("hub barrier over one non-blocking stream: %.1f us host time; hub %s, later work "
                "on another non-blocking stream %s\n",
                cost, ready(hub), ready(after));
    check(cuCtxSynchronize(), "sync");
  }
  {
    constexpr int n = 1000;
    double t0 = now_us();
    for (int i = 0; i < n; ++i)
      check(cuEventRecord(e1, CU_STREAM_LEGACY), "record");
    const double rec = (now_us() - t0) / n;
    t0 = now_us();
    for (int i = 0; i < n; ++i)
      check(cuStreamWaitEvent(nonblocking, e1, 0), "wait");
    const double wait = (now_us() - t0) / n;
    std::printf("idle: cuEventRecord on legacy %.2f us, cuStreamWaitEvent %.2f us\n", rec, wait);
  }

  std::printf("== 2. memory calls, host time\n");
  for (std::size_t mib : {2, 20, 128}) {
    const std::size_t bytes = mib << 20;
    char label[96];
    std::snprintf(label, sizeof label, "cuMemAlloc %zu MiB", mib);
    CUdeviceptr p = 0;
    timed(label, nonblocking, [&] { check(cuMemAlloc(&p, bytes), "alloc"); });
    std::snprintf(label, sizeof label, "cuMemFree %zu MiB (unrelated to the kernel)", mib);
    CUdeviceptr q = 0;
    check(cuMemAlloc(&q, bytes), "alloc");
    timed(label, nonblocking, [&] { // frees p, then q
      check(cuMemFree(p), "free");
      p = q;
    });
  }
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  std::size_t gran = 0;
  check(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "gran");
  std::printf("VMM granularity %zu KiB\n", gran >> 10);
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  for (std::size_t mib : {2, 20, 128}) {
    const std::size_t bytes = mib << 20;
    char label[96];
    CUmemGenericAllocationHandle h[2];
    CUdeviceptr va[2];
    int k = 0; // [0]: the idle run, [1]: the busy run
    std::snprintf(label, sizeof label, "cuMemCreate %zu MiB", mib);
    timed(label, nonblocking, [&] { check(cuMemCreate(&h[k++], bytes, &prop, 0), "create"); });
    k = 0;
    std::snprintf(label, sizeof label, "cuMemAddressReserve %zu MiB", mib);
    timed(label, nonblocking,
          [&] { check(cuMemAddressReserve(&va[k++], bytes, 0, 0, 0), "reserve"); });
    k = 0;
    std::snprintf(label, sizeof label, "cuMemMap %zu MiB (one handle)", mib);
    timed(label, nonblocking, [&] {
      check(cuMemMap(va[k], bytes, 0, h[k], 0), "map");
      ++k;
    });
    k = 0;
    std::snprintf(label, sizeof label, "cuMemSetAccess %zu MiB", mib);
    timed(label, nonblocking, [&] {
      check(cuMemSetAccess(va[k], bytes, &access, 1), "access");
      ++k;
    });
    k = 0;
    std::snprintf(label, sizeof label, "cuMemUnmap %zu MiB", mib);
    timed(label, nonblocking, [&] {
      check(cuMemUnmap(va[k], bytes), "unmap");
      ++k;
    });
    k = 0;
    std::snprintf(label, sizeof label, "cuMemRelease %zu MiB", mib);
    timed(label, nonblocking, [&] { check(cuMemRelease(h[k++]), "release"); });
    k = 0;
    std::snprintf(label, sizeof label, "cuMemAddressFree %zu MiB", mib);
    timed(label, nonblocking, [&] {
      check(cuMemAddressFree(va[k], bytes), "address free");
      ++k;
    });
  }
  {
    // Remapping: 64 MiB as 32 handles of 2 MiB mapped into a fresh range (what recycling
    // physical memory into a segment of another size costs).
    constexpr int n = 32;
    CUmemGenericAllocationHandle hs[n];
    for (auto& h : hs)
      check(cuMemCreate(&h, gran, &prop, 0), "create");
    CUdeviceptr va;
    check(cuMemAddressReserve(&va, n * gran, 0, 0, 0), "reserve");
    double t0 = now_us();
    for (int i = 0; i < n; ++i)
      check(cuMemMap(va + i * gran, gran, 0, hs[i], 0), "map");
    check(cuMemSetAccess(va, n * gran, &access, 1), "access");
    const double map = now_us() - t0;
    busy(nonblocking);
    t0 = now_us();
    check(cuMemUnmap(va, n * gran), "unmap");
    const double unmap = now_us() - t0;
    std::printf("64 MiB as 32 x 2 MiB handles: map+access %.1f us; unmap behind a kernel %.1f us\n",
                map, unmap);
    check(cuCtxSynchronize(), "sync");
    for (auto& h : hs)
      check(cuMemRelease(h), "release");
    check(cuMemAddressFree(va, n * gran), "address free");
  }
  std::printf("driver_facts: done\n");
  return 0;
}
