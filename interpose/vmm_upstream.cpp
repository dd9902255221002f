#include "interpose/vmm_upstream.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

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

vmm_upstream* vmm_upstream::create(context_link& link, fences& fe, bool segments,
                                   std::size_t arena_page) {
  if (!has_vmm(*link.real)) return nullptr;
  const CUmemAllocationProp prop = device_prop(link.device);
  std::size_t granularity = 0;
  ctx_scope scope(link);
  if (link.real->cuMemGetAllocationGranularity(&granularity, &prop,
                                               CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      granularity == 0) {
    return nullptr;
  }
  std::size_t reserve = 0;
  if (arena_page != 0 && arena_page % granularity != 0) {
    std::fprintf(stderr,
                 "gmem: warning: GMEM_ARENA_PAGE_MB: %zu bytes is not a multiple of device %d's "
                 "virtual memory granularity (%zu bytes); arena off\n",
                 arena_page, link.device, granularity);
    arena_page = 0;
  }
  // Twice the device's memory per range: a pool's arena never outgrows its first range, and
  // the pages given back and still retiring above it leave room to grow past them.
  std::size_t total = 0;
  if (arena_page != 0 &&
      (link.real->cuDeviceTotalMem_v2 == nullptr ||
       link.real->cuDeviceTotalMem_v2(&total, link.device) != CUDA_SUCCESS || total == 0)) {
    arena_page = 0; // cannot size the range
  }
  if (arena_page != 0) reserve = (2 * total + arena_page - 1) / arena_page * arena_page;
  if (!segments && arena_page == 0) return nullptr;
  auto* up = new vmm_upstream(link, fe, granularity, segments, arena_page, reserve);
  std::lock_guard lock(g_peer_mu);
  for (const auto& [owner, device] : g_peer_access)
    if (owner == link.ctx && device != link.device) up->peers_.push_back(device);
  return up;
}

vmm_upstream::vmm_upstream(context_link& link, fences& fe, std::size_t granularity, bool segments,
                           std::size_t arena_page, std::size_t arena_reserve)
    : link_(link), fe_(fe), fallback_(link), granularity_(granularity), segments_(segments),
      arena_page_(arena_page), arena_reserve_(arena_reserve) {}

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

template <class Attempt>
std::uintptr_t vmm_upstream::retrying(Attempt attempt, std::uint64_t counters::*count,
                                      std::uint64_t counters::*ns, CUresult& rc) noexcept {
  ctx_scope scope(link_);
  const std::uint64_t start = now_ns();
  std::uintptr_t va = attempt(rc);
  if (va == 0 && rc == CUDA_ERROR_OUT_OF_MEMORY) {
    reap(true); // retiring mappings and spare pieces still hold physical memory
    va = attempt(rc);
  }
  if (va == 0) return 0;
  {
    std::lock_guard lock(mu_);
    ++(count_.*count);
    count_.*ns += now_ns() - start;
  }
  reap(false);
  return va;
}

std::uintptr_t vmm_upstream::map(std::size_t bytes) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return 0;
  // Under a limit, retiring segments must be gone before more is mapped. Otherwise their
  // spare pieces serve this map first, and what has completed is torn down after it.
  // Retiring arena pages hold physical memory too, whichever kind of segment comes next.
  if (pool_ != nullptr && pool_->stats().limit_bytes != 0) reap(true);
  if (!segments_) return fallback_.map(bytes);
  if (bytes % granularity_ != 0) {
    {
      std::lock_guard lock(mu_);
      ++count_.fallback_maps;
    }
    return fallback_.map(bytes);
  }
  CUresult rc = CUDA_SUCCESS;
  const std::uintptr_t va = retrying([&](CUresult& r) { return map_vmm(bytes, r); },
                                     &counters::maps, &counters::map_ns, rc);
  if (va != 0 || rc == CUDA_ERROR_OUT_OF_MEMORY) return va;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    std::fprintf(stderr,
                 "gmem: warning: virtual memory mapping of a %zu-byte segment failed (CUresult "
                 "%d); using cuMemAlloc for such segments (GMEM_VMM=0 avoids the attempt)\n",
                 bytes, static_cast<int>(rc));
  }
  return fallback_.map(bytes);
}

const vmm_upstream::arena_range* vmm_upstream::arena_at_locked(std::uintptr_t address,
                                                               std::size_t& index) const {
  auto it = arenas_.upper_bound(address);
  if (it == arenas_.begin()) return nullptr;
  --it;
  const std::size_t i = (address - it->first) / arena_page_;
  if (i >= it->second.page.size()) return nullptr;
  index = i;
  return &it->second;
}

vmm_upstream::arena_range* vmm_upstream::arena_at_locked(std::uintptr_t address,
                                                         std::size_t& index) {
  return const_cast<arena_range*>(std::as_const(*this).arena_at_locked(address, index));
}

void vmm_upstream::set_pages_locked(std::uintptr_t va, std::size_t pages, page_state state) {
  for (std::size_t k = 0; k < pages; ++k) {
    std::size_t i = 0;
    if (arena_range* a = arena_at_locked(va + k * arena_page_, i)) a->page[i] = state;
  }
}

std::uintptr_t vmm_upstream::claim_locked(std::uintptr_t at, std::size_t pages) {
  std::size_t first = 0;
  if (at != 0 && at % arena_page_ == 0) {
    if (arena_range* a = arena_at_locked(at, first);
        a != nullptr && first + pages <= a->page.size()) {
      const auto begin = a->page.begin() + static_cast<std::ptrdiff_t>(first);
      if (std::all_of(begin, begin + static_cast<std::ptrdiff_t>(pages),
                      [](page_state p) { return p == page_state::unused; })) {
        set_pages_locked(at, pages, page_state::claimed);
        return at;
      }
    }
  }
  auto newest = arenas_.find(arena_newest_);
  if (newest == arenas_.end()) return 0;
  const std::vector<page_state>& page = newest->second.page;
  std::size_t top = page.size(); // above the highest page in use (retiring pages included)
  while (top > 0 && page[top - 1] == page_state::unused)
    --top;
  if (page.size() - top < pages) return 0;
  const std::uintptr_t va = newest->first + top * arena_page_;
  set_pages_locked(va, pages, page_state::claimed);
  return va;
}

std::uintptr_t vmm_upstream::extend_vmm(std::uintptr_t at, std::size_t bytes,
                                        CUresult& rc) noexcept {
  const real_driver& r = *link_.real;
  const std::size_t pages = bytes / arena_page_;
  std::vector<spare> taken; // spare pieces of exactly one page, mapped first
  auto take_spares_locked = [&] {
    for (std::size_t i = 0; i < spare_.size() && taken.size() < pages;) {
      if (spare_[i].p.bytes != arena_page_) {
        ++i;
        continue;
      }
      taken.push_back(spare_[i]);
      spare_bytes_ -= spare_[i].p.bytes;
      spare_[i] = spare_.back();
      spare_.pop_back();
    }
  };
  std::uintptr_t va = 0;
  {
    std::lock_guard lock(mu_);
    if ((va = claim_locked(at, pages)) != 0) take_spares_locked();
  }
  if (va == 0) { // a new range; two threads may both reserve one, the older stays usable by `at`
    const std::size_t reserve = std::max(arena_reserve_, bytes);
    CUdeviceptr base = 0;
    if ((rc = r.cuMemAddressReserve(&base, reserve, arena_page_, 0, 0)) != CUDA_SUCCESS) return 0;
    std::lock_guard lock(mu_);
    arena_range& a = arenas_[base];
    a.page.assign(reserve / arena_page_, page_state::unused);
    a.handle.assign(reserve / arena_page_, 0);
    arena_newest_ = base;
    ++count_.arena_reserves;
    va = base;
    set_pages_locked(va, pages, page_state::claimed);
    take_spares_locked();
  }
  std::vector<CUmemGenericAllocationHandle> mapped; // in page order from va
  std::vector<CUmemGenericAllocationHandle> created;
  auto undo = [&] {
    for (std::size_t i = 0; i < mapped.size(); ++i)
      (void)r.cuMemUnmap(va + i * arena_page_, arena_page_);
    for (CUmemGenericAllocationHandle h : created)
      (void)r.cuMemRelease(h);
    std::lock_guard lock(mu_);
    set_pages_locked(va, pages, page_state::unused);
    for (const spare& t : taken) { // back where they were: their owner releases them
      spare_.push_back(t);
      spare_bytes_ += t.p.bytes;
    }
    return std::uintptr_t{0};
  };
  const CUmemAllocationProp prop = device_prop(link_.device);
  for (std::size_t i = 0; i < pages; ++i) {
    CUmemGenericAllocationHandle h = i < taken.size() ? taken[i].p.handle : 0;
    if (h == 0) {
      if ((rc = r.cuMemCreate(&h, arena_page_, &prop, 0)) != CUDA_SUCCESS) return undo();
      created.push_back(h);
    }
    if ((rc = r.cuMemMap(va + i * arena_page_, arena_page_, 0, h, 0)) != CUDA_SUCCESS) {
      return undo();
    }
    mapped.push_back(h);
  }
  std::unique_lock lock(mu_); // peers_ must not change between the access and the pages' state
  const std::vector<CUmemAccessDesc> access = access_locked();
  if ((rc = r.cuMemSetAccess(va, bytes, access.data(), access.size())) != CUDA_SUCCESS) {
    lock.unlock();
    return undo();
  }
  for (std::size_t k = 0; k < pages; ++k) {
    std::size_t i = 0;
    arena_range* a = arena_at_locked(va + k * arena_page_, i);
    a->page[i] = page_state::mapped;
    a->handle[i] = mapped[k];
  }
  count_.arena_pages_mapped += pages;
  count_.arena_pages_recycled += taken.size();
  return va;
}

std::uintptr_t vmm_upstream::extend(std::uintptr_t at, std::size_t bytes) noexcept {
  if (arena_page_ == 0 || bytes == 0 || bytes % arena_page_ != 0 ||
      link_.dropped.load(std::memory_order_acquire)) {
    return 0;
  }
  if (pool_ != nullptr && pool_->stats().limit_bytes != 0) reap(true); // as map() does
  CUresult rc = CUDA_SUCCESS;
  const std::uintptr_t va = retrying([&](CUresult& r) { return extend_vmm(at, bytes, r); },
                                     &counters::arena_extends, &counters::arena_extend_ns, rc);
  if (va != 0 || rc == CUDA_ERROR_OUT_OF_MEMORY) return va;
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) {
    std::fprintf(stderr,
                 "gmem: warning: mapping %zu bytes of arena memory failed (CUresult %d); such "
                 "requests fail as out of memory (GMEM_ARENA=0 avoids the arena)\n",
                 bytes, static_cast<int>(rc));
  }
  return 0;
}

// Retires the mapped pages of [base, base + bytes) together, behind one event; pages not
// mapped there (a caller's mistake) are left alone.
void vmm_upstream::unmap_arena(std::uintptr_t base, std::size_t bytes) noexcept {
  if (base % arena_page_ != 0 || bytes % arena_page_ != 0) return; // not an arena range
  retiring r;
  {
    std::lock_guard lock(mu_);
    for (std::uintptr_t va = base; va < base + bytes; va += arena_page_) {
      std::size_t i = 0;
      arena_range* a = arena_at_locked(va, i);
      if (a == nullptr || a->page[i] != page_state::mapped) continue;
      a->page[i] = page_state::retiring; // its address stays taken until teardown unmaps it
      r.page.push_back(va);
      r.m.pieces.push_back(piece{a->handle[i], arena_page_});
      a->handle[i] = 0;
    }
  }
  if (r.page.empty()) return;
  r.m.base = base;
  r.m.bytes = bytes;
  r.done = retire_event();
  {
    std::lock_guard lock(mu_);
    r.seq = ++retire_seq_;
    ++count_.retires;
    count_.arena_unmapped_pages += r.page.size();
    for (const piece& p : r.m.pieces) {
      spare_.push_back(spare{p, r.seq});
      spare_bytes_ += p.bytes;
    }
    retiring_.push_back(std::move(r));
  }
  bound_spare();
}

void vmm_upstream::unmap(std::uintptr_t base, std::size_t bytes) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return;
  retiring r;
  bool arena = false;
  {
    std::lock_guard lock(mu_);
    std::size_t index = 0;
    arena = arena_at_locked(base, index) != nullptr;
    auto it = arena || !segments_ ? live_.end() : live_.find(base);
    if (it != live_.end()) {
      r.m = std::move(it->second);
      live_.erase(it);
    }
  }
  if (arena) {
    unmap_arena(base, bytes);
    return;
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
  if (!t.page.empty()) { // arena pages: the range stays reserved for later extends
    for (std::size_t i = 0; i < t.page.size(); ++i)
      (void)r.cuMemUnmap(t.page[i], t.m.pieces[i].bytes);
  } else {
    std::size_t off = 0;
    for (const piece& p : t.m.pieces) {
      (void)r.cuMemUnmap(t.m.base + off, p.bytes);
      off += p.bytes;
    }
    (void)r.cuMemAddressFree(t.m.base, t.m.bytes);
  }
  std::vector<CUmemGenericAllocationHandle> release;
  {
    std::lock_guard lock(mu_);
    for (std::uintptr_t va : t.page)
      set_pages_locked(va, 1, page_state::unused);
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
  for (const auto& [base, a] : arenas_) { // retiring pages: no work of `device` can be on them
    for (std::size_t i = 0; i < a.page.size(); ++i) {
      if (a.page[i] == page_state::mapped)
        (void)link_.real->cuMemSetAccess(base + i * arena_page_, arena_page_, &d, 1);
    }
  }
}

bool vmm_upstream::is_vmm(std::uintptr_t address) const noexcept {
  std::lock_guard lock(mu_);
  if (std::size_t index = 0; arena_at_locked(address, index) != nullptr) return true;
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
