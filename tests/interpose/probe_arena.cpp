// The arena (GMEM_ARENA, interpose/upstream/vmm_upstream.h) end to end: requests above 1 MiB served
// from pages the pool maps where its arena ends, given back by gmem_empty_cache, and refused
// for IPC. Page retirement under running kernels is scenario_vmm_retire run with GMEM_ARENA=1
// (probe_vmm.cpp).
#include <cstring>
#include <dlfcn.h>

#include <vector>

#include "tests/interpose/probe_check.h"

namespace probe {
namespace {

constexpr std::size_t k_mib = std::size_t{1} << 20;

bool holds(const block& b, unsigned char value) {
  std::vector<unsigned char> host(b.n);
  if (g.memcpy_dtoh(host.data(), b.p, b.n) != CUDA_SUCCESS) return false;
  for (unsigned char x : host)
    if (x != value) return false;
  return true;
}

} // namespace

// Large blocks written one after the other while the arena grows under them (each a new
// extend): every block must still hold its bytes at the end. Small blocks come from segments.
void scenario_arena_growth() {
  const std::size_t sizes[] = {3 * k_mib, 5 * k_mib,  20 * k_mib, 2 * k_mib,      50 * k_mib,
                               7 * k_mib, 64 * k_mib, 33 * k_mib, 4 * k_mib + 512};
  fake_cuda_counters before{}, after{};
  g.get_counters(&before);
  std::vector<block> blocks;
  unsigned char value = 1;
  for (std::size_t n : sizes) {
    CUdeviceptr p = 0;
    CHECK_CU(g.mem_alloc(&p, n));
    CHECK_CU(g.memset_d8(p, value++, n));
    blocks.push_back({p, n});
  }
  g.get_counters(&after);
  const unsigned long long large_allocs = after.mem_alloc_calls - before.mem_alloc_calls;
  CUdeviceptr small = 0;
  CHECK_CU(g.mem_alloc(&small, 64 << 10));
  CHECK_CU(g.memset_d8(small, 0xEE, 64 << 10));
  bool corrupted = !holds({small, 64 << 10}, 0xEE);
  value = 1;
  for (const block& b : blocks)
    corrupted = !holds(b, value++) || corrupted;
  g.get_counters(&after);
  std::printf("arena_growth corrupted=%d large_mem_allocs=%llu vmm_creates=%llu vmm_maps=%llu\n",
              corrupted ? 1 : 0, large_allocs,
              static_cast<unsigned long long>(after.vmm_creates - before.vmm_creates),
              static_cast<unsigned long long>(after.vmm_maps - before.vmm_maps));
  CHECK(!corrupted, "a block lost its bytes while the arena grew");
  for (const block& b : blocks)
    CHECK_CU(g.mem_free(b.p));
  CHECK_CU(g.mem_free(small));
}

// Freed arena memory goes back to the driver on gmem_empty_cache: every page unmapped (after
// the retirement event, which the empty-cache synchronization completes) and its physical
// memory released.
void scenario_arena_trim() {
  auto empty_cache = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "gmem_empty_cache"));
  CHECK(empty_cache != nullptr, "gmem_empty_cache not exported by the preloaded shim");
  if (empty_cache == nullptr) return;
  fake_cuda_counters before{}, held{}, after{};
  g.get_counters(&before);
  std::vector<CUdeviceptr> ps;
  for (std::size_t n : {40 * k_mib, 24 * k_mib, 72 * k_mib}) {
    CUdeviceptr p = 0;
    CHECK_CU(g.mem_alloc(&p, n));
    CHECK_CU(g.memset_d8(p, 0x11, n));
    ps.push_back(p);
  }
  for (CUdeviceptr p : ps)
    CHECK_CU(g.mem_free(p));
  g.get_counters(&held);
  CHECK(empty_cache() == 0, "gmem_empty_cache failed");
  g.get_counters(&after);
  auto delta = [](std::uint64_t a, std::uint64_t b) {
    return static_cast<unsigned long long>(a - b);
  };
  std::printf("arena_trim maps=%llu creates=%llu unmaps_before=%llu unmaps=%llu releases=%llu\n",
              delta(after.vmm_maps, before.vmm_maps), delta(after.vmm_creates, before.vmm_creates),
              delta(held.vmm_unmaps, before.vmm_unmaps), delta(after.vmm_unmaps, before.vmm_unmaps),
              delta(after.vmm_releases, before.vmm_releases));
}

// Arena memory exports a gmem handle when its pages are shareable (the test decides with
// FAKE_CUDA_FD_EXPORT whether they are), else it is refused; the arena serves either way.
void scenario_arena_ipc() {
  CUdeviceptr a = 0;
  CHECK_CU(g.mem_alloc(&a, 8 * k_mib));
  CUipcMemHandle h{};
  const CUresult r = g.ipc_get_mem_handle(&h, a);
  std::printf("arena_ipc rc=%d gmem_handle=%d\n", r,
              r == CUDA_SUCCESS && std::memcmp(h.reserved, "gmemIPC\2", 8) == 0 ? 1 : 0);
  CHECK(r == CUDA_SUCCESS || r == CUDA_ERROR_NOT_SUPPORTED,
        "cuIpcGetMemHandle of arena memory returned %d", r);
  CHECK_CU(g.mem_free(a));
}

// Stitching (GMEM_STITCH=1, 2 MiB pages): four 4 MiB arrays, the first and third freed, then
// 8 MiB asked: no free range is that long, but the four free pages are. The request must be
// served from them (no cuMemCreate; four cuMemMap of existing pages), hold its bytes, and
// leave the others' intact. Then a slow kernel writes the stitched block, which is freed
// without a stream while it runs: the range must stay mapped until the kernel is done (the
// fake faults otherwise), and the two 4 MiB requests that follow, which get its pages, must
// keep their own bytes (the range's retirement orders later work after the kernel, besides
// the pool's fence; the pool's own rule is tested in tests/pool/stitch_test.cpp).
void scenario_arena_stitch() {
  constexpr std::size_t k_array = 4 * k_mib;
  constexpr unsigned k_slow_us = 300000;
  CUdeviceptr a = 0, b = 0, c = 0, d = 0, e = 0, f = 0, h = 0;
  fake_cuda_counters start{};
  g.get_counters(&start);
  for (CUdeviceptr* p : {&a, &b, &c, &d})
    CHECK_CU(g.mem_alloc(p, k_array));
  CHECK_CU(g.memset_d8(a, 1, k_array));
  CHECK_CU(g.memset_d8(b, 2, k_array));
  CHECK_CU(g.memset_d8(c, 3, k_array));
  CHECK_CU(g.memset_d8(d, 4, k_array));
  CHECK_CU(g.mem_free(a));
  CHECK_CU(g.mem_free(c));
  fake_cuda_counters before{}, after{};
  g.get_counters(&before);
  CHECK_CU(g.mem_alloc(&e, 2 * k_array));
  g.get_counters(&after);
  CHECK_CU(g.memset_d8(e, 0x77, 2 * k_array));
  bool corrupted =
      !holds({e, 2 * k_array}, 0x77) || !holds({b, k_array}, 2) || !holds({d, k_array}, 4);
  const bool outside = e + 2 * k_array <= a || e >= d + k_array; // a range of its own
  // CUDA IPC of the stitched block: its pages export as the arena's do.
  CUipcMemHandle ipc{};
  const CUresult ipc_rc = g.ipc_get_mem_handle(&ipc, e);
  const bool gmem_handle = ipc_rc == CUDA_SUCCESS && std::memcmp(ipc.reserved, "gmemIPC\2", 8) == 0;
  CUstream s = nullptr, s2 = nullptr;
  CHECK_CU(g.stream_create_with_priority(&s, CU_STREAM_NON_BLOCKING, 0));
  CHECK_CU(g.stream_create_with_priority(&s2, CU_STREAM_NON_BLOCKING, 0));
  CHECK_CU(g.launch_kernel(s, k_slow_us, e, 0x99, 2 * k_array));
  CHECK_CU(g.mem_free(e));
  CHECK_CU(g.mem_alloc(&f, k_array));
  CHECK_CU(g.mem_alloc(&h, k_array));
  CHECK_CU(g.launch_kernel(s2, 0, f, 0xF0, k_array));
  CHECK_CU(g.launch_kernel(s2, 0, h, 0xF1, k_array));
  CHECK_CU(g.ctx_synchronize());
  corrupted = !holds({f, k_array}, 0xF0) || !holds({h, k_array}, 0xF1) || !holds({b, k_array}, 2) ||
              !holds({d, k_array}, 4) || corrupted;
  auto delta = [](std::uint64_t x, std::uint64_t y) {
    return static_cast<unsigned long long>(x - y);
  };
  std::printf("arena_stitch corrupted=%d outside=%d creates_at_once=%llu maps_at_once=%llu "
              "ipc_rc=%d gmem_handle=%d\n",
              corrupted ? 1 : 0, outside ? 1 : 0, delta(after.vmm_creates, before.vmm_creates),
              delta(after.vmm_maps, before.vmm_maps), static_cast<int>(ipc_rc),
              gmem_handle ? 1 : 0);
  CHECK(!corrupted, "a block lost its bytes around a stitched range");
  for (CUdeviceptr p : {b, d, f, h})
    CHECK_CU(g.mem_free(p));
  CHECK_CU(g.ctx_synchronize());
  // Trim: every page goes back, the ones the range mapped included.
  auto empty_cache = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "gmem_empty_cache"));
  CHECK(empty_cache != nullptr && empty_cache() == 0, "gmem_empty_cache failed");
  fake_cuda_counters end{};
  g.get_counters(&end);
  std::printf("arena_stitch_trim creates=%llu releases=%llu\n",
              delta(end.vmm_creates, start.vmm_creates),
              delta(end.vmm_releases, start.vmm_releases));
}

} // namespace probe
