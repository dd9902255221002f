// Virtual-memory segments (interpose/vmm_upstream.h) against the fake driver, whose cuMemUnmap
// does not synchronize and leaves the range inaccessible: a segment torn down while a "kernel"
// still writes into it crashes this probe (SIGSEGV on the fake's stream thread).
#include <chrono>
#include <thread>

#include "tests/interpose/probe_check.h"

namespace probe {

// Two oversize blocks (own segments) are written by slow kernels on a non-blocking stream and
// freed. An allocation of the same size then barriers (no host sync), which frees both, and
// with GMEM_MAX_CACHED=1 the pool gives the idle segments back at once: they must be retired,
// not torn down, while their kernels run. Once the kernels are done, the next segment mapped
// tears them down.
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
  std::this_thread::sleep_for(std::chrono::microseconds(3 * k_slow_us));
  CHECK_CU(g.mem_alloc(&d, 2 * k_bytes)); // maps a segment: reaps what has retired
  g.get_counters(&later);
  std::printf("vmm_retire host_syncs=%llu unmaps_at_once=%llu unmaps_later=%llu\n",
              static_cast<unsigned long long>(after.ctx_syncs - before.ctx_syncs),
              static_cast<unsigned long long>(after.vmm_unmaps - before.vmm_unmaps),
              static_cast<unsigned long long>(later.vmm_unmaps - before.vmm_unmaps));
  CHECK_CU(g.mem_free(c));
  CHECK_CU(g.mem_free(d));
  CHECK_CU(g.ctx_synchronize());
}

} // namespace probe
