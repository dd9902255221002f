// Virtual-memory segments (interpose/upstream/vmm_upstream.h) against the fake driver, whose
// cuMemUnmap does not synchronize and leaves the range inaccessible: a segment torn down while a
// "kernel" still writes into it crashes this probe (SIGSEGV on the fake's stream thread).
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/interpose/probe_check.h"

namespace probe {

// Two oversize blocks (own segments) are written by slow kernels on a non-blocking stream and
// freed. An allocation of the same size then barriers (no host sync), which frees both, and
// with GMEM_MAX_CACHED=1 the pool gives the idle segments back at once: they must be retired,
// not torn down, while their kernels run. Their physical memory is recycled at once for the
// segment the allocation maps (no cuMemCreate), and the new owner's write on another
// non-blocking stream must land after the old kernel's. Once the kernels are done, the next
// segment mapped tears the old ranges down.
void scenario_vmm_retire() {
  constexpr std::size_t k_bytes = std::size_t{32} << 20;
  constexpr unsigned k_slow_us = 300000;
  CUstream s = nullptr;
  CHECK_CU(g.stream_create_with_priority(&s, CU_STREAM_NON_BLOCKING, 0));
  CUdeviceptr a = 0, b = 0, c = 0, d = 0;
  CHECK_CU(g.mem_alloc(&a, k_bytes));
  CHECK_CU(g.mem_alloc(&b, k_bytes));
  CHECK_CU(g.launch_kernel(s, k_slow_us, a, 0xAA, k_bytes));
  CHECK_CU(g.launch_kernel(s, k_slow_us, b, 0xAA, k_bytes));
  CHECK_CU(g.mem_free(a));
  CHECK_CU(g.mem_free(b));
  fake_cuda_counters before{}, after{}, later{};
  g.get_counters(&before);
  CHECK_CU(g.mem_alloc(&c, k_bytes));
  g.get_counters(&after);
  CUstream s2 = nullptr;
  CHECK_CU(g.stream_create_with_priority(&s2, CU_STREAM_NON_BLOCKING, 0));
  CHECK_CU(g.launch_kernel(s2, 0, c, 0xBB, k_bytes));
  CHECK_CU(g.stream_synchronize(s2));
  std::vector<unsigned char> host(k_bytes);
  CHECK_CU(g.memcpy_dtoh(host.data(), c, k_bytes));
  const bool corrupted =
      std::any_of(host.begin(), host.end(), [](unsigned char x) { return x != 0xBB; });
  std::this_thread::sleep_for(std::chrono::microseconds(3 * k_slow_us));
  CHECK_CU(g.mem_alloc(&d, 2 * k_bytes)); // maps a segment: reaps what has retired
  g.get_counters(&later);
  std::printf("vmm_retire host_syncs=%llu creates_at_once=%llu corrupted=%d unmaps_at_once=%llu "
              "unmaps_later=%llu\n",
              static_cast<unsigned long long>(after.ctx_syncs - before.ctx_syncs),
              static_cast<unsigned long long>(after.vmm_creates - before.vmm_creates),
              corrupted ? 1 : 0,
              static_cast<unsigned long long>(after.vmm_unmaps - before.vmm_unmaps),
              static_cast<unsigned long long>(later.vmm_unmaps - before.vmm_unmaps));
  CHECK_CU(g.mem_free(c));
  CHECK_CU(g.mem_free(d));
  CHECK_CU(g.ctx_synchronize());
}

// Spare physical memory is bounded (256 MiB at least): ten 40 MiB segments given back while
// their kernels run exceed it, so the free waits for the oldest retired segment's event (not a
// device synchronization) and tears it down before returning.
void scenario_vmm_budget() {
  constexpr std::size_t k_bytes = std::size_t{40} << 20;
  constexpr int k_n = 10;
  CUstream s = nullptr;
  CHECK_CU(g.stream_create_with_priority(&s, CU_STREAM_NON_BLOCKING, 0));
  CUdeviceptr p[k_n] = {};
  for (auto& x : p) {
    CHECK_CU(g.mem_alloc(&x, k_bytes));
    CHECK_CU(g.launch_kernel(s, 20000, x, 0xAA, k_bytes));
  }
  for (auto x : p)
    CHECK_CU(g.mem_free(x));
  fake_cuda_counters before{}, after{};
  g.get_counters(&before);
  CUdeviceptr c = 0;
  CHECK_CU(g.mem_alloc(&c, k_bytes)); // barrier; the cache cap gives the idle segments back
  g.get_counters(&after);
  std::printf("vmm_budget host_syncs=%llu unmaps_at_once=%llu\n",
              static_cast<unsigned long long>(after.ctx_syncs - before.ctx_syncs),
              static_cast<unsigned long long>(after.vmm_unmaps - before.vmm_unmaps));
  CHECK_CU(g.mem_free(c));
  CHECK_CU(g.ctx_synchronize());
}

} // namespace probe
