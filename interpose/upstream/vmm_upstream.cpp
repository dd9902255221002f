// Device segments as virtual-memory mappings (vmm_upstream.h), creation and peer access. The
// arena's pages are in vmm_pages.cpp, retirement and teardown in vmm_retire.cpp.
#include "interpose/upstream/vmm_upstream.h"

#include <algorithm>
#include <cstdio>
#include <unistd.h>
#include <utility>

#include "interpose/upstream/vmm_detail.h"

namespace gmem::shim {

using vmm_detail::device_prop;
using vmm_detail::read_write;

namespace {

bool has_vmm(const real_driver& r) {
  return r.cuMemCreate != nullptr && r.cuMemRelease != nullptr &&
         r.cuMemAddressReserve != nullptr && r.cuMemAddressFree != nullptr &&
         r.cuMemMap != nullptr && r.cuMemUnmap != nullptr && r.cuMemSetAccess != nullptr &&
         r.cuMemGetAllocationGranularity != nullptr;
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
  int fd_handles = 0; // CUDA IPC of this memory (ipc_sharing.h) needs shareable pieces
  if (link.real->cuDeviceGetAttribute != nullptr &&
      link.real->cuMemExportToShareableHandle != nullptr &&
      link.real->cuDeviceGetAttribute(
          &fd_handles, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
          link.device) == CUDA_SUCCESS &&
      fd_handles == 1) {
    up->fd_handles_.store(true, std::memory_order_relaxed);
  }
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

CUresult vmm_upstream::create_piece(CUmemGenericAllocationHandle* handle,
                                    std::size_t bytes) noexcept {
  CUmemAllocationProp prop = device_prop(link_.device);
  if (fd_handles_.load(std::memory_order_relaxed)) {
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    const CUresult rc = link_.real->cuMemCreate(handle, bytes, &prop, 0);
    if (rc != CUDA_ERROR_NOT_SUPPORTED && rc != CUDA_ERROR_INVALID_VALUE) return rc;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    const CUresult plain = link_.real->cuMemCreate(handle, bytes, &prop, 0);
    // The handle type was the trouble: do without it from now on (IPC of these pieces is
    // refused, ipc_sharing.cpp says so).
    if (plain == CUDA_SUCCESS) fd_handles_.store(false, std::memory_order_relaxed);
    return plain;
  }
  return link_.real->cuMemCreate(handle, bytes, &prop, 0);
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
    if ((rc = create_piece(&created, fresh)) != CUDA_SUCCESS) {
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

CUresult vmm_upstream::export_pieces(std::uintptr_t address, std::size_t bytes, std::size_t skip,
                                     std::size_t max, piece_export& out) const noexcept {
  out = piece_export{};
  if (bytes == 0 || address + bytes < address) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUmemGenericAllocationHandle> handles; // of pieces [skip, skip + max)
  std::lock_guard lock(mu_); // the pieces stay while it is held: teardown needs it too
  std::size_t index = 0;
  if (const arena_range* a = arena_at_locked(address, index)) {
    const std::uintptr_t base = address - address % arena_page_;
    const std::size_t pages = (address - base + bytes + arena_page_ - 1) / arena_page_;
    for (std::size_t k = 0; k < pages; ++k) {
      std::size_t i = 0;
      if (arena_at_locked(base + k * arena_page_, i) != a || a->page[i] != page_state::mapped)
        return CUDA_ERROR_INVALID_VALUE;
      if (k >= skip && k - skip < max) handles.push_back(a->handle[i]);
    }
    out.first = base;
    out.count = pages;
    out.total = pages * arena_page_;
    out.bytes.assign(handles.size(), arena_page_);
  } else {
    auto it = live_.upper_bound(address);
    if (it == live_.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    const mapping& m = it->second;
    if (address + bytes > m.base + m.bytes) return CUDA_ERROR_INVALID_VALUE;
    std::uintptr_t at = m.base;
    for (const piece& p : m.pieces) {
      if (at + p.bytes > address && at < address + bytes) {
        if (out.count == 0) out.first = at;
        if (out.count >= skip && out.count - skip < max) {
          handles.push_back(p.handle);
          out.bytes.push_back(p.bytes);
        }
        ++out.count;
        out.total += p.bytes;
      }
      at += p.bytes;
    }
  }
  if (link_.real->cuMemExportToShareableHandle == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  for (CUmemGenericAllocationHandle h : handles) {
    int fd = -1;
    const CUresult rc = link_.real->cuMemExportToShareableHandle(
        &fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (rc != CUDA_SUCCESS || fd < 0) {
      for (int open : out.fds)
        ::close(open);
      out.fds.clear();
      return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_UNKNOWN;
    }
    out.fds.push_back(fd);
  }
  return CUDA_SUCCESS;
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
