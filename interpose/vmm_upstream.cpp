#include "interpose/vmm_upstream.h"

#include <cstdio>

namespace gmem::shim {
namespace {

bool has_vmm(const real_driver& r) {
  return r.cuMemCreate != nullptr && r.cuMemRelease != nullptr &&
         r.cuMemAddressReserve != nullptr && r.cuMemAddressFree != nullptr &&
         r.cuMemMap != nullptr && r.cuMemUnmap != nullptr && r.cuMemSetAccess != nullptr &&
         r.cuMemGetAllocationGranularity != nullptr;
}

CUmemAllocationProp device_prop(int device) {
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUmemAccessDesc read_write(int device) {
  CUmemAccessDesc d = {};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

std::mutex g_peer_mu;
std::vector<std::pair<CUcontext, int>> g_peer_access; // (owner, device); guarded by g_peer_mu

} // namespace

void vmm_upstream::note_peer_access(CUcontext owner, int device) {
  std::lock_guard lock(g_peer_mu);
  for (const auto& [o, d] : g_peer_access)
    if (o == owner && d == device) return;
  g_peer_access.emplace_back(owner, device);
}

vmm_upstream* vmm_upstream::create(context_link& link, fences& fe) {
  if (!has_vmm(*link.real)) return nullptr;
  const CUmemAllocationProp prop = device_prop(link.device);
  std::size_t granularity = 0;
  ctx_scope scope(link);
  if (link.real->cuMemGetAllocationGranularity(&granularity, &prop,
                                               CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      granularity == 0) {
    return nullptr;
  }
  auto* up = new vmm_upstream(link, fe, granularity);
  std::lock_guard lock(g_peer_mu);
  for (const auto& [owner, device] : g_peer_access)
    if (owner == link.ctx && device != link.device) up->peers_.push_back(device);
  return up;
}

vmm_upstream::vmm_upstream(context_link& link, fences& fe, std::size_t granularity)
    : link_(link), fe_(fe), fallback_(link), granularity_(granularity) {}

std::vector<CUmemAccessDesc> vmm_upstream::access_locked() const {
  std::vector<CUmemAccessDesc> d{read_write(link_.device)};
  for (int p : peers_)
    d.push_back(read_write(p));
  return d;
}

std::uintptr_t vmm_upstream::map_vmm(std::size_t bytes, CUresult& rc) noexcept {
  const real_driver& r = *link_.real;
  const CUmemAllocationProp prop = device_prop(link_.device);
  CUmemGenericAllocationHandle h = 0;
  if ((rc = r.cuMemCreate(&h, bytes, &prop, 0)) != CUDA_SUCCESS) return 0;
  CUdeviceptr va = 0;
  if ((rc = r.cuMemAddressReserve(&va, bytes, granularity_, 0, 0)) != CUDA_SUCCESS) {
    (void)r.cuMemRelease(h);
    return 0;
  }
  if ((rc = r.cuMemMap(va, bytes, 0, h, 0)) != CUDA_SUCCESS) {
    (void)r.cuMemAddressFree(va, bytes);
    (void)r.cuMemRelease(h);
    return 0;
  }
  std::lock_guard lock(mu_); // peers_ must not change between the access and the insert
  const std::vector<CUmemAccessDesc> access = access_locked();
  if ((rc = r.cuMemSetAccess(va, bytes, access.data(), access.size())) != CUDA_SUCCESS) {
    (void)r.cuMemUnmap(va, bytes);
    (void)r.cuMemAddressFree(va, bytes);
    (void)r.cuMemRelease(h);
    return 0;
  }
  live_.emplace(va, mapping{va, bytes, h});
  return va;
}

std::uintptr_t vmm_upstream::map(std::size_t bytes) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return 0;
  const bool limited = pool_ != nullptr && pool_->stats().limit_bytes != 0;
  reap(limited && retiring_bytes() != 0);
  if (bytes % granularity_ != 0) return fallback_.map(bytes);
  ctx_scope scope(link_);
  CUresult rc = CUDA_SUCCESS;
  std::uintptr_t va = map_vmm(bytes, rc);
  if (va == 0 && rc == CUDA_ERROR_OUT_OF_MEMORY && retiring_bytes() != 0) {
    reap(true); // retiring segments still hold physical memory
    va = map_vmm(bytes, rc);
  }
  if (va != 0) return va;
  if (rc == CUDA_ERROR_OUT_OF_MEMORY) return 0;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    std::fprintf(stderr,
                 "gmem: warning: virtual memory mapping of a %zu-byte segment failed (CUresult "
                 "%d); using cuMemAlloc for such segments (GMEM_VMM=0 avoids the attempt)\n",
                 bytes, static_cast<int>(rc));
  }
  return fallback_.map(bytes);
}

void vmm_upstream::unmap(std::uintptr_t base, std::size_t bytes) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return;
  mapping m;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(base);
    if (it != live_.end()) {
      m = it->second;
      live_.erase(it);
    }
  }
  if (m.base == 0) { // a fallback segment
    fallback_.unmap(base, bytes);
    return;
  }
  const event_handle done = retire_event();
  {
    std::lock_guard lock(mu_);
    retiring_.push_back(retiring{m, done});
    retiring_bytes_ += m.bytes;
  }
  reap(false);
}

// Completes after all work issued so far on every stream: the barrier makes the legacy
// stream wait for every non-blocking stream, and the legacy stream already follows every
// blocking one.
event_handle vmm_upstream::retire_event() noexcept {
  if (!fe_.barrier()) return 0;
  return fe_.record(0);
}

void vmm_upstream::teardown(const mapping& m) noexcept {
  const real_driver& r = *link_.real;
  ctx_scope scope(link_);
  (void)r.cuMemUnmap(m.base, m.bytes);
  (void)r.cuMemRelease(m.handle);
  (void)r.cuMemAddressFree(m.base, m.bytes);
}

void vmm_upstream::reap(bool wait) noexcept {
  if (wait) {
    bool pending = false;
    {
      std::lock_guard lock(mu_);
      pending = !retiring_.empty();
    }
    if (!pending || !fe_.synchronize()) wait = false; // capture: nothing can be waited for
  }
  for (;;) {
    retiring front;
    {
      std::lock_guard lock(mu_);
      if (retiring_.empty()) return;
      front = retiring_.front();
      if (front.done == 0 && !wait) { // retired during a capture: try for an event now
        retiring_.front().done = front.done = retire_event();
        if (front.done == 0) return;
      }
    }
    if (!wait && !fe_.query(front.done)) return; // later ones were retired after it
    {
      std::lock_guard lock(mu_);
      if (retiring_.empty() || retiring_.front().m.base != front.m.base) continue; // raced
      retiring_.pop_front();
      retiring_bytes_ -= front.m.bytes;
    }
    if (front.done != 0) fe_.release(front.done);
    teardown(front.m);
  }
}

void vmm_upstream::grant(int device) noexcept {
  if (device == link_.device || link_.dropped.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mu_);
  for (int p : peers_)
    if (p == device) return;
  peers_.push_back(device);
  const CUmemAccessDesc d = read_write(device);
  ctx_scope scope(link_);
  for (const auto& [base, m] : live_)
    (void)link_.real->cuMemSetAccess(base, m.bytes, &d, 1);
}

bool vmm_upstream::is_vmm(std::uintptr_t base) const noexcept {
  std::lock_guard lock(mu_);
  auto it = live_.upper_bound(base);
  if (it == live_.begin()) return false;
  --it;
  return base < it->first + it->second.bytes;
}

std::size_t vmm_upstream::retiring_bytes() const noexcept {
  std::lock_guard lock(mu_);
  return retiring_bytes_;
}

} // namespace gmem::shim
