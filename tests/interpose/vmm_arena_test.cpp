// vmm_upstream's arena (extend, page-wise unmap, retirement) directly against the fake driver
// (tests/fake_cuda), without the hooks: its memory is host memory mapped from memfds, a page
// has no access before cuMemSetAccess and faults once cuMemUnmap'ed, and the legacy stream is
// a thread, so a "kernel" still writing into a page torn down too early crashes this test.
// The end-to-end arena tests (through the pool) are in interpose_test.cpp.
#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "interpose/upstream/vmm_upstream.h"
#include "tests/fake_cuda/fake_cuda.h"

namespace gmem::shim {
namespace {

constexpr std::size_t k_page = std::size_t{4} << 20; // two fake granules (2 MiB)

// The driver table as the shim would resolve it, from the fake this test links against.
const real_driver& fake_driver() {
  static const real_driver r = [] {
    real_driver d;
    d.cuCtxGetCurrent = &::cuCtxGetCurrent;
    d.cuCtxPushCurrent_v2 = &::cuCtxPushCurrent_v2;
    d.cuCtxPopCurrent_v2 = &::cuCtxPopCurrent_v2;
    d.cuCtxSynchronize = &::cuCtxSynchronize;
    d.cuDeviceTotalMem_v2 = &::cuDeviceTotalMem_v2;
    d.cuMemAlloc_v2 = &::cuMemAlloc_v2;
    d.cuMemFree_v2 = &::cuMemFree_v2;
    d.cuMemCreate = &::cuMemCreate;
    d.cuMemRelease = &::cuMemRelease;
    d.cuMemAddressReserve = &::cuMemAddressReserve;
    d.cuMemAddressFree = &::cuMemAddressFree;
    d.cuMemMap = &::cuMemMap;
    d.cuMemUnmap = &::cuMemUnmap;
    d.cuMemSetAccess = &::cuMemSetAccess;
    d.cuMemGetAllocationGranularity = &::cuMemGetAllocationGranularity;
    d.cuEventSynchronize = &::cuEventSynchronize;
    d.cuDeviceGetAttribute = &::cuDeviceGetAttribute;
    d.cuMemExportToShareableHandle = &::cuMemExportToShareableHandle;
    return d;
  }();
  return r;
}

// Events on the legacy stream, which every test "kernel" runs on: recording there completes
// after all earlier work, so no barrier is needed.
class legacy_fences final : public fences {
public:
  bool synchronize() noexcept override { return cuCtxSynchronize() == CUDA_SUCCESS; }
  bool barrier() noexcept override { return true; }
  event_handle record(stream_handle s) noexcept override {
    CUevent e = nullptr;
    if (cuEventCreate(&e, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS) return 0;
    if (cuEventRecord(e, reinterpret_cast<CUstream>(s)) != CUDA_SUCCESS) return 0;
    return reinterpret_cast<event_handle>(e);
  }
  bool query(event_handle e) noexcept override {
    return cuEventQuery(reinterpret_cast<CUevent>(e)) == CUDA_SUCCESS;
  }
  bool wait(stream_handle s, event_handle e) noexcept override {
    return cuStreamWaitEvent(reinterpret_cast<CUstream>(s), reinterpret_cast<CUevent>(e), 0) ==
           CUDA_SUCCESS;
  }
  void release(event_handle e) noexcept override {
    (void)cuEventDestroy_v2(reinterpret_cast<CUevent>(e));
  }
};

fake_cuda_counters counters() {
  fake_cuda_counters c{};
  fakeGetCounters(&c);
  return c;
}

std::size_t free_bytes() {
  std::size_t free = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_SUCCESS);
  return free;
}

bool filled(std::uintptr_t p, std::size_t bytes, unsigned char value) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return std::all_of(b, b + bytes, [&](unsigned char x) { return x == value; });
}

// One upstream per test over the primary context; what a test leaves mapped is given back,
// and torn down, at its end so that the next test sees the whole fake device.
class arena_test : public testing::Test {
protected:
  void SetUp() override {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    link_.real = &fake_driver();
    link_.ctx = ctx;
    link_.device = 0;
    up_ = vmm_upstream::create(link_, fe_, segments_, k_page);
    ASSERT_NE(up_, nullptr);
    free_at_start_ = free_bytes();
  }
  void TearDown() override {
    for (const auto& [base, bytes] : held_)
      up_->unmap(base, bytes);
    up_->reap(true);
    EXPECT_EQ(up_->spare_bytes(), 0u);
    EXPECT_EQ(free_bytes(), free_at_start_); // every page's physical memory went back
    // The upstream is leaked: the arena's address space stays reserved, as in the shim.
  }
  std::uintptr_t extend(std::uintptr_t at, std::size_t pages) {
    const std::uintptr_t p = up_->extend(at, pages * k_page);
    if (p != 0) held_.emplace_back(p, pages * k_page);
    return p;
  }

  bool segments_ = false;
  context_link link_;
  legacy_fences fe_;
  vmm_upstream* up_ = nullptr;
  std::size_t free_at_start_ = 0;
  std::vector<std::pair<std::uintptr_t, std::size_t>> held_; // given back by TearDown
};

TEST_F(arena_test, extends_where_the_arena_ends_and_keeps_the_data) {
  EXPECT_EQ(up_->arena_page(), k_page);
  const fake_cuda_counters before = counters();
  const std::uintptr_t a = extend(0, 2);
  ASSERT_NE(a, 0u);
  EXPECT_EQ(a % k_page, 0u);
  EXPECT_EQ(counters().vmm_creates - before.vmm_creates, 2u); // a physical allocation per page
  EXPECT_EQ(counters().vmm_maps - before.vmm_maps, 2u);
  std::memset(reinterpret_cast<void*>(a), 0x5A, 2 * k_page); // faults without the access
  EXPECT_EQ(extend(a + 2 * k_page, 3), a + 2 * k_page);
  std::memset(reinterpret_cast<void*>(a + 2 * k_page), 0x6B, 3 * k_page);
  EXPECT_TRUE(filled(a, 2 * k_page, 0x5A));
  EXPECT_TRUE(up_->is_vmm(a));
  EXPECT_TRUE(up_->is_vmm(a + 5 * k_page - 1));
  const vmm_upstream::counters v = up_->stats();
  EXPECT_EQ(v.arena_extends, 2u);
  EXPECT_EQ(v.arena_pages_mapped, 5u);
  EXPECT_EQ(v.arena_reserves, 1u);
}

TEST_F(arena_test, extends_elsewhere_when_the_requested_pages_are_taken) {
  const std::uintptr_t a = extend(0, 2);
  ASSERT_NE(a, 0u);
  const std::uintptr_t b = extend(a, 1); // mapped already: above the highest page in use
  EXPECT_EQ(b, a + 2 * k_page);
  const std::uintptr_t c = extend(a + k_page / 2, 1); // not a page boundary: placed on top
  EXPECT_EQ(c, a + 3 * k_page);
  EXPECT_EQ(extend(a, 0), 0u);
  EXPECT_EQ(up_->extend(0, k_page + 4096), 0u); // not a whole number of pages
}

// A page given back while a kernel still writes into it retires: its physical memory serves the
// next extend at once (no cuMemCreate), its address is not reused, and it is unmapped only once
// the kernel is done. Unmapping it early would crash the fake's stream thread.
TEST_F(arena_test, pages_given_back_retire_behind_running_work) {
  const std::uintptr_t a = extend(0, 3);
  ASSERT_NE(a, 0u);
  held_.clear();
  ASSERT_EQ(fakeLaunchKernel(nullptr, 300000, a + k_page, 0xAA, k_page), CUDA_SUCCESS);
  const fake_cuda_counters before = counters();
  up_->unmap(a + k_page, k_page); // the middle page: a hole in the arena
  EXPECT_EQ(up_->spare_bytes(), k_page);
  const std::uintptr_t b = extend(a + k_page, 1); // its address is still retiring
  EXPECT_EQ(b, a + 3 * k_page);
  fake_cuda_counters now = counters();
  EXPECT_EQ(now.vmm_creates - before.vmm_creates, 0u); // the retired page's memory
  EXPECT_EQ(now.vmm_unmaps - before.vmm_unmaps, 0u);
  EXPECT_EQ(up_->stats().arena_pages_recycled, 1u);
  EXPECT_EQ(up_->spare_bytes(), 0u);
  up_->reap(); // the kernel still runs: nothing to tear down
  EXPECT_EQ(counters().vmm_unmaps - before.vmm_unmaps, 0u);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  up_->reap();
  EXPECT_EQ(counters().vmm_unmaps - before.vmm_unmaps, 1u);
  EXPECT_EQ(up_->stats().arena_unmapped_pages, 1u);
  // The new owner's write lands after the old kernel's: same physical memory.
  std::memset(reinterpret_cast<void*>(b), 0xBB, k_page);
  EXPECT_TRUE(filled(b, k_page, 0xBB));
  // Torn down, the hole is mapped again where it was.
  EXPECT_EQ(extend(a + k_page, 1), a + k_page);
  held_.emplace_back(a, k_page);
  held_.emplace_back(a + 2 * k_page, k_page);
  held_.emplace_back(b, k_page);
}

// One unmap may cover pages of several extends; all retire together, and a wait (trim) tears
// them down and releases their physical memory.
TEST_F(arena_test, unmap_spans_extends_and_reap_gives_the_memory_back) {
  const std::uintptr_t a = extend(0, 1);
  ASSERT_EQ(extend(a + k_page, 2), a + k_page);
  ASSERT_EQ(extend(a + 3 * k_page, 1), a + 3 * k_page);
  held_.clear();
  EXPECT_EQ(free_bytes(), free_at_start_ - 4 * k_page);
  const fake_cuda_counters before = counters();
  up_->unmap(a + k_page, 3 * k_page);
  up_->reap(true);
  EXPECT_EQ(counters().vmm_unmaps - before.vmm_unmaps, 3u);
  EXPECT_EQ(free_bytes(), free_at_start_ - k_page);
  EXPECT_EQ(up_->stats().retires, 1u);
  EXPECT_EQ(up_->spare_bytes(), 0u);
  held_.emplace_back(a, k_page);
}

// The driver out of memory: spare pieces (here a retired segment's, of another size) are
// released by waiting for their retirement, then the extend is retried.
class arena_with_segments_test : public arena_test {
protected:
  arena_with_segments_test() { segments_ = true; }
};

TEST_F(arena_with_segments_test, out_of_memory_waits_for_retired_memory_and_retries) {
  constexpr std::size_t k_segment = 3 * (std::size_t{2} << 20); // not a page multiple
  const std::uintptr_t s = up_->map(k_segment);
  ASSERT_NE(s, 0u);
  const std::size_t pages = free_bytes() / k_page;
  ASSERT_NE(extend(0, pages), 0u); // the whole device
  ASSERT_EQ(fakeLaunchKernel(nullptr, 100000, s, 0xAA, k_segment), CUDA_SUCCESS);
  up_->unmap(s, k_segment); // retires: its 6 MiB stay held until its event completes
  EXPECT_EQ(up_->spare_bytes(), k_segment);
  const std::uintptr_t more = extend(0, 1);
  EXPECT_NE(more, 0u);
  EXPECT_EQ(up_->spare_bytes(), 0u);
  EXPECT_EQ(extend(0, 2), 0u); // truly out of memory now; nothing left claimed
  EXPECT_EQ(up_->stats().arena_pages_mapped, pages + 1);
}

TEST_F(arena_with_segments_test, segments_stay_virtual_memory_beside_the_arena) {
  const fake_cuda_counters before = counters();
  const std::uintptr_t s = up_->map(std::size_t{2} << 20);
  ASSERT_NE(s, 0u);
  EXPECT_EQ(counters().mem_alloc_calls - before.mem_alloc_calls, 0u);
  EXPECT_TRUE(up_->is_vmm(s));
  up_->unmap(s, std::size_t{2} << 20);
}

TEST_F(arena_test, segments_are_cuMemAlloc_without_gmem_vmm) {
  const fake_cuda_counters before = counters();
  const std::uintptr_t s = up_->map(std::size_t{2} << 20);
  ASSERT_NE(s, 0u);
  EXPECT_EQ(counters().mem_alloc_calls - before.mem_alloc_calls, 1u);
  EXPECT_EQ(counters().vmm_creates - before.vmm_creates, 0u);
  EXPECT_FALSE(up_->is_vmm(s));
  up_->unmap(s, std::size_t{2} << 20);
  EXPECT_EQ(counters().mem_free_calls - before.mem_free_calls, 1u);
}

// Two threads extending at once claim different pages (claims are made under the lock, the
// driver is called outside it).
TEST_F(arena_test, concurrent_extends_get_distinct_pages) {
  constexpr int k_each = 24;
  std::vector<std::uintptr_t> got[2];
  std::thread t[2];
  for (int i = 0; i < 2; ++i) {
    t[i] = std::thread([&, i] {
      for (int k = 0; k < k_each; ++k)
        got[i].push_back(up_->extend(0, k_page));
    });
  }
  for (auto& x : t)
    x.join();
  std::set<std::uintptr_t> all;
  for (const auto& g : got) {
    for (std::uintptr_t p : g) {
      EXPECT_NE(p, 0u);
      all.insert(p);
      held_.emplace_back(p, k_page);
    }
  }
  EXPECT_EQ(all.size(), 2u * k_each);
}

// Stitching (upstream::stitch): a fresh range maps the arena pages' own physical memory in
// the order given, so it reads and writes what the arena addresses hold, and maps no memory of
// its own; unstitched, it retires and is torn down without releasing the pages.
TEST_F(arena_test, stitch_maps_arena_pages_in_order_without_new_memory) {
  const std::uintptr_t a = extend(0, 4);
  ASSERT_NE(a, 0u);
  std::memset(reinterpret_cast<void*>(a), 0x10, k_page);
  std::memset(reinterpret_cast<void*>(a + 2 * k_page), 0x30, k_page);
  EXPECT_TRUE(up_->can_stitch());
  const fake_cuda_counters before = counters();
  const std::size_t free_before = free_bytes();
  const std::uintptr_t pages[] = {a + 2 * k_page, a};
  const std::uintptr_t s = up_->stitch(pages, 2);
  ASSERT_NE(s, 0u);
  EXPECT_EQ(s % k_page, 0u);
  EXPECT_EQ(counters().vmm_creates - before.vmm_creates, 0u);
  EXPECT_EQ(counters().vmm_maps - before.vmm_maps, 2u);
  EXPECT_EQ(free_bytes(), free_before);
  EXPECT_TRUE(filled(s, k_page, 0x30)); // the third page first
  EXPECT_TRUE(filled(s + k_page, k_page, 0x10));
  std::memset(reinterpret_cast<void*>(s + k_page), 0x11, k_page);
  EXPECT_TRUE(filled(a, k_page, 0x11)); // one physical page, two addresses
  EXPECT_TRUE(up_->is_vmm(s + 2 * k_page - 1));
  vmm_upstream::counters v = up_->stats();
  EXPECT_EQ(v.stitches, 1u);
  EXPECT_EQ(v.stitched_pages, 2u);
  up_->unstitch(s, 2);
  EXPECT_FALSE(up_->is_vmm(s));
  up_->reap(true);
  EXPECT_EQ(counters().vmm_unmaps - before.vmm_unmaps, 2u);
  EXPECT_EQ(counters().vmm_releases - before.vmm_releases, 0u); // the pages are the arena's
  EXPECT_EQ(up_->spare_bytes(), 0u);
  EXPECT_TRUE(filled(a, k_page, 0x11));
  EXPECT_EQ(up_->stats().unstitches, 1u);
  // Pages not mapped in the arena are refused.
  const std::uintptr_t bad[] = {a, a + 8 * k_page};
  EXPECT_EQ(up_->stitch(bad, 2), 0u);
  const std::uintptr_t odd[] = {a + k_page / 2};
  EXPECT_EQ(up_->stitch(odd, 1), 0u);
}

// A stitched range given back while a kernel still writes through it retires: it is unmapped
// only once the kernel is done (unmapping it early would crash the fake's stream thread).
TEST_F(arena_test, unstitch_retires_behind_running_work) {
  const std::uintptr_t a = extend(0, 3);
  ASSERT_NE(a, 0u);
  const std::uintptr_t pages[] = {a, a + 2 * k_page};
  const std::uintptr_t s = up_->stitch(pages, 2);
  ASSERT_NE(s, 0u);
  ASSERT_EQ(fakeLaunchKernel(nullptr, 300000, s, 0xCC, 2 * k_page), CUDA_SUCCESS);
  const fake_cuda_counters before = counters();
  up_->unstitch(s, 2);
  up_->reap();
  EXPECT_EQ(counters().vmm_unmaps - before.vmm_unmaps, 0u); // the kernel still runs
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  up_->reap();
  EXPECT_EQ(counters().vmm_unmaps - before.vmm_unmaps, 2u);
  EXPECT_TRUE(filled(a, k_page, 0xCC)); // the kernel wrote the arena's pages
  EXPECT_TRUE(filled(a + 2 * k_page, k_page, 0xCC));
}

// IPC of a stitched range exports its pieces: the arena pages' physical allocations, in the
// range's order, each a descriptor of the same memory.
TEST_F(arena_test, a_stitched_range_exports_its_pages) {
  if (!up_->exportable()) GTEST_SKIP() << "the fake's pages are not exportable here";
  const std::uintptr_t a = extend(0, 3);
  ASSERT_NE(a, 0u);
  std::memset(reinterpret_cast<void*>(a + 2 * k_page), 0x42, k_page);
  const std::uintptr_t pages[] = {a + 2 * k_page, a};
  const std::uintptr_t s = up_->stitch(pages, 2);
  ASSERT_NE(s, 0u);
  vmm_upstream::piece_export out;
  ASSERT_EQ(up_->export_pieces(s + 512, k_page, 0, 8, out), CUDA_SUCCESS);
  EXPECT_EQ(out.first, s);
  EXPECT_EQ(out.count, 2u);
  EXPECT_EQ(out.total, 2 * k_page);
  ASSERT_EQ(out.fds.size(), 2u);
  // The first descriptor is the third arena page's memory.
  void* view = mmap(nullptr, k_page, PROT_READ, MAP_SHARED, out.fds[0], 0);
  ASSERT_NE(view, MAP_FAILED);
  EXPECT_TRUE(filled(reinterpret_cast<std::uintptr_t>(view), k_page, 0x42));
  munmap(view, k_page);
  for (int fd : out.fds)
    close(fd);
  up_->unstitch(s, 2);
}

// The fake's cuMemSetAccess, as the arena relies on it: a run of contiguous mappings at once,
// never a range with an unmapped hole or part of a mapping.
TEST(fake_vmm, set_access_covers_contiguous_mappings_only) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
  constexpr std::size_t g = std::size_t{2} << 20;
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUmemAccessDesc rw = {};
  rw.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 4 * g, g, 0, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle h[3] = {};
  for (int i = 0; i < 3; ++i)
    ASSERT_EQ(cuMemCreate(&h[i], g, &prop, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va, g, 0, h[0], 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va + g, g, 0, h[1], 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(va + 3 * g, g, 0, h[2], 0), CUDA_SUCCESS); // page 2 is a hole
  EXPECT_EQ(cuMemSetAccess(va, 2 * g, &rw, 1), CUDA_SUCCESS);
  std::memset(reinterpret_cast<void*>(va), 1, 2 * g);
  EXPECT_EQ(cuMemSetAccess(va, 4 * g, &rw, 1), CUDA_ERROR_INVALID_VALUE);     // the hole
  EXPECT_EQ(cuMemSetAccess(va, 3 * g, &rw, 1), CUDA_ERROR_INVALID_VALUE);     // ends in it
  EXPECT_EQ(cuMemSetAccess(va, g + g / 2, &rw, 1), CUDA_ERROR_INVALID_VALUE); // part of one
  EXPECT_EQ(cuMemSetAccess(va + 3 * g, g, &rw, 1), CUDA_SUCCESS);
  for (CUdeviceptr at : {va, va + g, va + 3 * g})
    EXPECT_EQ(cuMemUnmap(at, g), CUDA_SUCCESS);
  for (auto x : h)
    EXPECT_EQ(cuMemRelease(x), CUDA_SUCCESS);
  EXPECT_EQ(cuMemAddressFree(va, 4 * g), CUDA_SUCCESS);
}

} // namespace
} // namespace gmem::shim
