#include "interpose/vmm_upstream.h"

#include <algorithm>
#include <chrono>
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

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

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

void vmm_upstream::gather_locked(std::size_t bytes, std::vector<piece>& out, std::size_t& fresh,
                                 std::vector<spare>& taken) {
  std::size_t need = bytes;
  // Largest spare pieces first: fewer mappings per segment.
  std::sort(spare_.begin(), spare_.end(),
            [](const spare& a, const spare& b) { return a.p.bytes > b.p.bytes; });
  for (std::size_t i = 0; i < spare_.size() && need != 0 && out.size() < k_max_pieces - 1;) {
    if (spare_[i].p.bytes > need) {
      ++i;
      continue;
    }
    need -= spare_[i].p.bytes;
    out.push_back(spare_[i].p);
    taken.push_back(spare_[i]);
    spare_bytes_ -= spare_[i].p.bytes;
    spare_.erase(spare_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  fresh = need;
}

std::uintptr_t vmm_upstream::map_vmm(std::size_t bytes, CUresult& rc) noexcept {
  const real_driver& r = *link_.real;
  std::vector<piece> pieces;
  std::vector<spare> taken;
  std::size_t fresh = 0;
  {
    std::lock_guard lock(mu_);
    gather_locked(bytes, pieces, fresh, taken);
  }
  CUmemGenericAllocationHandle created = 0;
  CUdeviceptr va = 0;
  std::size_t mapped = 0; // pieces mapped so far
  auto undo = [&] {
    std::size_t off = 0;
    for (std::size_t i = 0; i < mapped; ++i) {
      (void)r.cuMemUnmap(va + off, pieces[i].bytes);
      off += pieces[i].bytes;
    }
    if (va != 0) (void)r.cuMemAddressFree(va, bytes);
    if (created != 0) (void)r.cuMemRelease(created);
    std::lock_guard lock(mu_);
    for (const spare& t : taken) { // back where they were: their owner releases them
      spare_.push_back(t);
      spare_bytes_ += t.p.bytes;
    }
    return std::uintptr_t{0};
  };
  if (fresh != 0) {
    const CUmemAllocationProp prop = device_prop(link_.device);
    if ((rc = r.cuMemCreate(&created, fresh, &prop, 0)) != CUDA_SUCCESS) {
      created = 0;
      return undo();
    }
    pieces.push_back(piece{created, fresh});
  }
  if ((rc = r.cuMemAddressReserve(&va, bytes, granularity_, 0, 0)) != CUDA_SUCCESS) {
    va = 0;
    return undo();
  }
  std::size_t off = 0;
  for (const piece& p : pieces) {
    if ((rc = r.cuMemMap(va + off, p.bytes, 0, p.handle, 0)) != CUDA_SUCCESS) return undo();
    ++mapped;
    off += p.bytes;
  }
  std::unique_lock lock(mu_); // peers_ must not change between the access and the insert
  const std::vector<CUmemAccessDesc> access = access_locked();
  off = 0;
  for (const piece& p : pieces) {
    if ((rc = r.cuMemSetAccess(va + off, p.bytes, access.data(), access.size())) != CUDA_SUCCESS) {
      lock.unlock();
      return undo();
    }
    off += p.bytes;
  }
  count_.fresh_bytes += fresh;
  count_.recycled_bytes += bytes - fresh;
  live_.emplace(va, mapping{va, bytes, std::move(pieces)});
  return va;
}

std::uintptr_t vmm_upstream::map(std::size_t bytes) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return 0;
  // Under a limit, retiring segments must be gone before more is mapped. Otherwise their
  // spare pieces serve this map first, and what has completed is torn down after it.
  if (pool_ != nullptr && pool_->stats().limit_bytes != 0) reap(true);
  if (bytes % granularity_ != 0) {
    {
      std::lock_guard lock(mu_);
      ++count_.fallback_maps;
    }
    return fallback_.map(bytes);
  }
  ctx_scope scope(link_);
  const std::uint64_t start = now_ns();
  CUresult rc = CUDA_SUCCESS;
  std::uintptr_t va = map_vmm(bytes, rc);
  if (va == 0 && rc == CUDA_ERROR_OUT_OF_MEMORY) {
    reap(true); // retiring segments and spare pieces still hold physical memory
    va = map_vmm(bytes, rc);
  }
  if (va != 0) {
    {
      std::lock_guard lock(mu_);
      ++count_.maps;
      count_.map_ns += now_ns() - start;
    }
    reap(false);
    return va;
  }
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
  retiring r;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(base);
    if (it != live_.end()) {
      r.m = std::move(it->second);
      live_.erase(it);
    }
  }
  if (r.m.base == 0) { // a fallback segment
    fallback_.unmap(base, bytes);
    return;
  }
  r.done = retire_event();
  {
    std::lock_guard lock(mu_);
    r.seq = ++retire_seq_;
    ++count_.retires;
    for (const piece& p : r.m.pieces) {
      spare_.push_back(spare{p, r.seq});
      spare_bytes_ += p.bytes;
    }
    retiring_.push_back(std::move(r));
  }
  // No teardown here: the pool usually unmaps to make room for a map, which recycles these.
  bound_spare();
}

std::size_t vmm_upstream::spare_budget() const noexcept {
  constexpr std::size_t k_min = std::size_t{256} << 20;
  const std::size_t reserved = pool_ != nullptr ? pool_->stats().reserved_bytes : 0;
  return std::max(k_min, reserved / 32);
}

void vmm_upstream::bound_spare() noexcept {
  const std::size_t budget = spare_budget();
  for (;;) {
    event_handle done = 0;
    {
      std::lock_guard lock(mu_);
      if (spare_bytes_ <= budget || retiring_.empty()) return;
      done = retiring_.front().done;
    }
    if (done == 0) return; // retired during a capture: nothing to wait for
    ctx_scope scope(link_);
    const std::uint64_t start = now_ns();
    if (link_.real->cuEventSynchronize(reinterpret_cast<CUevent>(done)) != CUDA_SUCCESS) return;
    {
      std::lock_guard lock(mu_);
      ++count_.spare_waits;
      count_.spare_wait_ns += now_ns() - start;
    }
    reap(false); // tears down the oldest (and any others now complete)
  }
}

// Completes after all work issued so far on every stream: the barrier makes the legacy
// stream wait for every non-blocking stream, and the legacy stream already follows every
// blocking one.
event_handle vmm_upstream::retire_event() noexcept {
  if (!fe_.barrier()) return 0;
  return fe_.record(0);
}

void vmm_upstream::teardown(const retiring& t) noexcept {
  const real_driver& r = *link_.real;
  ctx_scope scope(link_);
  const std::uint64_t start = now_ns();
  std::size_t off = 0;
  for (const piece& p : t.m.pieces) {
    (void)r.cuMemUnmap(t.m.base + off, p.bytes);
    off += p.bytes;
  }
  (void)r.cuMemAddressFree(t.m.base, t.m.bytes);
  std::vector<CUmemGenericAllocationHandle> release;
  {
    std::lock_guard lock(mu_);
    for (std::size_t i = 0; i < spare_.size();) {
      if (spare_[i].owner != t.seq) {
        ++i;
        continue;
      }
      release.push_back(spare_[i].p.handle);
      spare_bytes_ -= spare_[i].p.bytes;
      spare_[i] = spare_.back();
      spare_.pop_back();
    }
  }
  for (CUmemGenericAllocationHandle h : release)
    (void)r.cuMemRelease(h); // no longer mapped anywhere: the memory goes back
  std::lock_guard lock(mu_);
  ++count_.teardowns;
  count_.teardown_ns += now_ns() - start;
}

void vmm_upstream::reap(bool wait) noexcept {
  if (wait) {
    bool any = false;
    {
      std::lock_guard lock(mu_);
      any = !retiring_.empty();
    }
    if (!any || !fe_.synchronize()) wait = false; // capture: nothing can be waited for
  }
  for (;;) {
    std::uint64_t seq = 0;
    event_handle done = 0;
    {
      std::lock_guard lock(mu_);
      if (retiring_.empty()) return;
      seq = retiring_.front().seq;
      done = retiring_.front().done;
    }
    if (!wait) {
      if (done == 0) { // retired during a capture: try for an event now
        done = retire_event();
        if (done == 0) return;
        std::lock_guard lock(mu_);
        if (retiring_.empty() || retiring_.front().seq != seq || retiring_.front().done != 0) {
          fe_.release(done); // another thread got there first
          continue;
        }
        retiring_.front().done = done;
      }
      if (!fe_.query(done)) return; // later ones were retired after it
    }
    retiring t;
    {
      std::lock_guard lock(mu_);
      if (retiring_.empty() || retiring_.front().seq != seq) continue; // another thread took it
      t = std::move(retiring_.front());
      retiring_.pop_front();
    }
    if (t.done != 0) fe_.release(t.done);
    teardown(t);
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
  for (const auto& [base, m] : live_) {
    std::size_t off = 0;
    for (const piece& p : m.pieces) {
      (void)link_.real->cuMemSetAccess(base + off, p.bytes, &d, 1);
      off += p.bytes;
    }
  }
}

bool vmm_upstream::is_vmm(std::uintptr_t address) const noexcept {
  std::lock_guard lock(mu_);
  auto it = live_.upper_bound(address);
  if (it == live_.begin()) return false;
  --it;
  return address < it->first + it->second.bytes;
}

std::size_t vmm_upstream::spare_bytes() const noexcept {
  std::lock_guard lock(mu_);
  return spare_bytes_;
}

vmm_upstream::counters vmm_upstream::stats() const noexcept {
  std::lock_guard lock(mu_);
  return count_;
}

} // namespace gmem::shim
