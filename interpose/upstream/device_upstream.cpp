// The segment upstreams over the real driver (driver_glue.h): cuMemAlloc_v2 / cuMemFree_v2 for
// device memory, cuMemHostAlloc / cuMemFreeHost for pinned host memory. Apart from the rest of
// the glue so that vmm_upstream, which falls back to device_upstream, links without the hooks
// (tests/interpose/vmm_arena_test.cpp).
#include <chrono>

#include "interpose/upstream/driver_glue.h"

namespace gmem::shim {
namespace {
std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}
} // namespace

std::uintptr_t device_upstream::map(std::size_t bytes) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return 0;
  ctx_scope scope(link_);
  const std::uint64_t start = now_ns();
  CUdeviceptr p = 0;
  const bool ok = link_.real->cuMemAlloc_v2(&p, bytes) == CUDA_SUCCESS;
  map_ns_.fetch_add(now_ns() - start, std::memory_order_relaxed);
  return ok ? p : 0;
}

void device_upstream::unmap(std::uintptr_t base, std::size_t) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return;
  ctx_scope scope(link_);
  const std::uint64_t start = now_ns();
  (void)link_.real->cuMemFree_v2(base);
  unmap_ns_.fetch_add(now_ns() - start, std::memory_order_relaxed);
}

std::uintptr_t host_upstream::map(std::size_t bytes) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return 0;
  ctx_scope scope(link_);
  void* p = nullptr;
  return link_.real->cuMemHostAlloc(&p, bytes, flags_) == CUDA_SUCCESS
             ? reinterpret_cast<std::uintptr_t>(p)
             : 0;
}

void host_upstream::unmap(std::uintptr_t base, std::size_t) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return;
  ctx_scope scope(link_);
  (void)link_.real->cuMemFreeHost(reinterpret_cast<void*>(base));
}

} // namespace gmem::shim
