// The arena (GMEM_ARENA, interpose/backends/vmm_upstream.h) end to end: requests above 1 MiB served
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

} // namespace probe
