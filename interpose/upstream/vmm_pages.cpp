// The arena's pages (vmm_upstream.h, "Arenas"): claiming address space page by page, mapping
// an extend() (recycling spare pieces), giving page-aligned parts back behind one event, and
// stitching mapped pages into ranges of their own.
#include "interpose/upstream/vmm_detail.h"

#include <algorithm>
#include <utility>

namespace gmem::shim {

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
  for (std::size_t i = 0; i < pages; ++i) {
    CUmemGenericAllocationHandle h = i < taken.size() ? taken[i].p.handle : 0;
    if (h == 0) {
      if ((rc = create_piece(&h, arena_page_)) != CUDA_SUCCESS) return undo();
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

std::uintptr_t vmm_upstream::stitch(const std::uintptr_t* pages, std::size_t count) noexcept {
  if (arena_page_ == 0 || count == 0 || link_.dropped.load(std::memory_order_acquire)) return 0;
  const real_driver& r = *link_.real;
  std::vector<piece> pieces;
  {
    std::lock_guard lock(mu_);
    for (std::size_t k = 0; k < count; ++k) {
      std::size_t i = 0;
      const arena_range* a = arena_at_locked(pages[k], i);
      if (pages[k] % arena_page_ != 0 || a == nullptr || a->page[i] != page_state::mapped)
        return 0; // not a mapped arena page: the pool's mistake, refused
      pieces.push_back(piece{a->handle[i], arena_page_});
    }
  }
  // The pool lends these pages to the range until unstitch(): no trim unmaps them meanwhile,
  // so their handles stay valid without the lock.
  ctx_scope scope(link_);
  const std::uint64_t start = vmm_detail::now_ns();
  const std::size_t bytes = count * arena_page_;
  CUdeviceptr va = 0;
  std::size_t mapped = 0;
  auto undo = [&] {
    for (std::size_t k = 0; k < mapped; ++k)
      (void)r.cuMemUnmap(va + k * arena_page_, arena_page_);
    if (va != 0) (void)r.cuMemAddressFree(va, bytes);
    return std::uintptr_t{0};
  };
  if (r.cuMemAddressReserve(&va, bytes, arena_page_, 0, 0) != CUDA_SUCCESS) {
    va = 0;
    return undo();
  }
  for (const piece& p : pieces) {
    if (r.cuMemMap(va + mapped * arena_page_, arena_page_, 0, p.handle, 0) != CUDA_SUCCESS)
      return undo();
    ++mapped;
  }
  std::unique_lock lock(mu_); // peers_ must not change between the access and the insert
  const std::vector<CUmemAccessDesc> access = access_locked();
  if (r.cuMemSetAccess(va, bytes, access.data(), access.size()) != CUDA_SUCCESS) {
    lock.unlock();
    return undo();
  }
  live_.emplace(va, mapping{va, bytes, std::move(pieces)});
  ++count_.stitches;
  count_.stitched_pages += count;
  count_.stitch_ns += vmm_detail::now_ns() - start;
  return va;
}

// Retired like a segment (unmap(): work issued before may still use the range), but its
// pieces are the arena's pages: none becomes spare, so its teardown releases nothing.
void vmm_upstream::unstitch(std::uintptr_t base, std::size_t count) noexcept {
  if (link_.dropped.load(std::memory_order_acquire)) return;
  retiring t;
  {
    std::lock_guard lock(mu_);
    auto it = live_.find(base);
    if (it == live_.end() || it->second.bytes != count * arena_page_) return;
    t.m = std::move(it->second);
    live_.erase(it);
  }
  t.done = retire_event();
  std::lock_guard lock(mu_);
  t.seq = ++retire_seq_;
  ++count_.retires;
  ++count_.unstitches;
  retiring_.push_back(std::move(t));
}

} // namespace gmem::shim
