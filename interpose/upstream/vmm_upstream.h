// Device segments as virtual-memory mappings (cuMemCreate + cuMemAddressReserve + cuMemMap +
// cuMemSetAccess), so that giving a segment back never blocks the host.
//
// Why: cuMemFree waits until the whole device is idle. On the H200 a cuMemFree of an unrelated
// 2-128 MiB buffer took 200 ms behind a 200 ms kernel on another stream, while cuMemUnmap and
// cuMemRelease took 23-54 us (bench/probes/driver_facts.cu). A pool that reshapes its memory
// as request sizes change (PyTorch's varying sequence lengths: ~19 unmaps per training step)
// drained the GPU queue at every one of them.
//
// Safety: the pool unmaps a segment once all its blocks are free, and with barrier fences
// "free" means later work is ordered after the old owners' work, not that the old work has
// finished. So unmap() does not unmap: it retires the segment behind an event that completes
// after all work issued so far on every stream (a barrier, then a record on the legacy
// stream), and the range is torn down once that event has completed (queried, never waited
// for: after the next map, or when the program synchronizes).
// Physical memory is recycled at once: a retired segment's allocations (pieces) become spare,
// and the next segment mapped is assembled from spare pieces (whole ones, largest first, at
// most k_max_pieces) plus a new allocation for the rest; the same physical memory is then
// mapped at two addresses until the old range is torn down. That is safe for the same reason
// the pool may reuse a free block: work issued from now on is ordered after the old work.
// Spare pieces not reused by the time their segment is torn down are released. So the
// physical memory held is what the pool reserves plus what was given back and not reused
// while the GPU was still behind. That excess is bounded: beyond spare_budget() (1/32 of
// what the pool reserves, at least 256 MiB), unmap() waits on the host for the oldest retired
// segment's event. The GPU keeps running the work queued after that point, unlike behind
// cuMemFree or cuCtxSynchronize, which drain the device: the host slows to the GPU's pace.
// While the pool has a memory limit, map() first waits for retiring segments, so physical
// memory never exceeds the limit; the driver running out of memory also makes it wait, then
// retry.
//
// Sizes the VMM granularity does not divide (segments shrunk to fit a limit) and any VMM
// failure other than out-of-memory fall back to cuMemAlloc_v2 / cuMemFree_v2.
// Peer access: VMM memory is not covered by cuCtxEnablePeerAccess; grant() extends every
// mapping, present and future, to another device (the shim calls it from that hook).
//
// Arenas (GMEM_ARENA, pool_options::arena; upstream::extend): address space reserved in large
// ranges (twice the device's memory each, so that one range serves a pool's lifetime) and
// mapped page by page, each page its own physical allocation of exactly arena_page() bytes,
// because cuMemUnmap cannot unmap part of a mapping and the pool gives back any page-aligned
// part of its arena. A page is unused, claimed (an extend() is mapping it, outside mu_),
// mapped, or retiring. Pages given back retire as segments do: their pieces become spare at
// once (the next extend or map recycles them), their addresses stay claimed until teardown
// has unmapped them, and the range itself is never freed. extend() maps at the requested
// address when those pages are unused, else above the highest page in use of the newest range,
// else in a new range. One cuMemSetAccess covers all pages an extend() mapped (the driver
// accepts a range of contiguous mappings).
// With segments off (GMEM_VMM=0, GMEM_ARENA=1) ordinary segments are cuMemAlloc / cuMemFree
// (fallback_) and only the arena is virtual memory.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <mutex>
#include <vector>

#include "interpose/upstream/driver_glue.h"

namespace gmem::shim {

class vmm_upstream final : public upstream {
public:
  // `segments`: map() uses virtual memory (GMEM_VMM), else cuMemAlloc. `arena_page`: bytes per
  // arena page (GMEM_ARENA_PAGE_MB), 0 = no arena. nullptr if this driver or device has no
  // virtual memory management, or neither segments nor an arena could use it.
  static vmm_upstream* create(context_link& link, fences& fe, bool segments,
                              std::size_t arena_page);
  void attach(const pool* p) { pool_ = p; } // whose limit map() and extend() honour

  std::uintptr_t map(std::size_t bytes) noexcept override;
  void unmap(std::uintptr_t base, std::size_t bytes) noexcept override;
  std::size_t arena_page() const noexcept override { return arena_page_; }
  std::uintptr_t extend(std::uintptr_t at, std::size_t bytes) noexcept override;
  // Stitched ranges (pool_options::stitch): a fresh reservation with each arena page's own
  // physical allocation mapped in the order given, one access call for the range. A live
  // range is a mapping like a segment's (live_), so IPC, peers and is_vmm() treat it alike;
  // unstitch() retires it behind the same event as a segment, but its pieces stay the arena's
  // (never spare, never released by its teardown).
  bool can_stitch() const noexcept override { return arena_page_ != 0; }
  std::uintptr_t stitch(const std::uintptr_t* pages, std::size_t count) noexcept override;
  void unstitch(std::uintptr_t base, std::size_t count) noexcept override;
  bool segments() const noexcept { return segments_; } // ordinary segments are VMM mappings
  const device_upstream& fallback() const noexcept { return fallback_; } // cuMemAlloc segments
  // Tears down retired segments and arena pages whose event has completed (the program
  // synchronized, say); with wait, all of them, after a fence (gmem_empty_cache).
  void reap(bool wait) noexcept;
  void reap() noexcept { reap(false); }
  void grant(int device) noexcept; // every mapping also readable and writable by `device`
  // cuCtxEnablePeerAccess succeeded: `device` may access the memory of context `owner`.
  // Remembered for pools created later; the caller grants it to an existing one.
  static void note_peer_access(CUcontext owner, int device);
  // Inside a segment this maps by VMM or inside an arena range (no legacy IPC handle).
  bool is_vmm(std::uintptr_t address) const noexcept;
  // CUDA IPC of such memory (ipc_sharing.h): physical allocations are created exportable as
  // POSIX file descriptors when the device supports it (asked once, in create(); a cuMemCreate
  // that refuses the handle type is retried without it, and later ones do without).
  bool exportable() const noexcept { return fd_handles_.load(std::memory_order_relaxed); }
  // The physical pieces behind [address, address + bytes) (arena pages, or the pieces of one
  // segment), in address order: where the first is mapped, how many there are, their bytes,
  // and for pieces [skip, skip + max) a file descriptor each (the caller closes them).
  struct piece_export {
    std::uintptr_t first = 0;
    std::size_t count = 0;
    std::size_t total = 0;
    std::vector<std::size_t> bytes; // of the exported pieces
    std::vector<int> fds;
  };
  // CUDA_ERROR_INVALID_VALUE: the range is not (or no longer) wholly mapped by this upstream;
  // otherwise the driver's answer to cuMemExportToShareableHandle (CUDA_ERROR_NOT_SUPPORTED,
  // say, for pieces created without the handle type). Nothing is left open on failure.
  CUresult export_pieces(std::uintptr_t address, std::size_t bytes, std::size_t skip,
                         std::size_t max, piece_export& out) const noexcept;
  std::size_t spare_bytes() const noexcept; // physical memory held for reuse

  // Where the host's time goes (GMEM_VERBOSE prints them): segments mapped, bytes of them
  // served by recycled pieces, retirements (segments and arena ranges), teardowns, the host
  // waits bound_spare made; arena extends, the pages they mapped (recycled: spare pieces
  // reused), address ranges reserved, and arena pages given back; stitched ranges made, their
  // host time and pages, and those given back.
// clang-format off
#define GMEM_VMM_COUNTERS(X)                                                                       \
  X(maps) X(map_ns) X(recycled_bytes) X(fresh_bytes) X(retires) X(teardowns) X(teardown_ns)       \
  X(spare_waits) X(spare_wait_ns) X(fallback_maps) X(arena_extends) X(arena_extend_ns)            \
  X(arena_pages_mapped) X(arena_pages_recycled) X(arena_reserves) X(arena_unmapped_pages)       \
  X(stitches) X(stitch_ns) X(stitched_pages) X(unstitches)
  // clang-format on
  struct counters {
#define GMEM_VMM_FIELD(n) std::uint64_t n = 0;
    GMEM_VMM_COUNTERS(GMEM_VMM_FIELD)
#undef GMEM_VMM_FIELD
  };
  counters stats() const noexcept;

private:
  static constexpr std::size_t k_max_pieces = 8; // spare pieces per new segment
  vmm_upstream(context_link& link, fences& fe, std::size_t granularity, bool segments,
               std::size_t arena_page, std::size_t arena_reserve);
  struct piece {
    CUmemGenericAllocationHandle handle = 0;
    std::size_t bytes = 0;
  };
  struct mapping { // a live or retiring segment: its pieces back [base, base + bytes) in order
    std::uintptr_t base = 0;
    std::size_t bytes = 0;
    std::vector<piece> pieces;
  };
  struct retiring {
    mapping m;                        // a segment; for arena pages, m.pieces are the pages
    std::vector<std::uintptr_t> page; // arena pages: the address of each of m.pieces
    std::uint64_t seq = 0;
    event_handle done = 0; // 0: no event yet (a barrier was not possible): ask again later
  };
  struct spare {
    piece p;
    std::uint64_t owner = 0; // seq of the retiring segment whose teardown releases it
  };
  enum class page_state : std::uint8_t { unused, claimed, mapped, retiring };
  struct arena_range { // reserved address space [base, base + page.size() * arena_page_)
    std::vector<page_state> page;
    std::vector<CUmemGenericAllocationHandle> handle; // of each mapped or retiring page
  };
  // cuMemCreate of one piece, exportable while fd_handles_ holds.
  CUresult create_piece(CUmemGenericAllocationHandle* handle, std::size_t bytes) noexcept;
  std::uintptr_t map_vmm(std::size_t bytes, CUresult& rc) noexcept;
  std::uintptr_t extend_vmm(std::uintptr_t at, std::size_t bytes, CUresult& rc) noexcept;
  // attempt(rc) (map_vmm or extend_vmm) in the device's context, once more after waiting for
  // retirements when the driver is out of memory; on success counts it and its time.
  template <class Attempt>
  std::uintptr_t retrying(Attempt attempt, std::uint64_t counters::*count,
                          std::uint64_t counters::*ns, CUresult& rc) noexcept;
  // Claims `pages` unused pages (at `at` if possible, else at the top of the newest range);
  // 0 when a new range is needed.
  std::uintptr_t claim_locked(std::uintptr_t at, std::size_t pages);
  void set_pages_locked(std::uintptr_t va, std::size_t pages, page_state state);
  // The range holding `address` and the page's index in it; nullptr outside every range.
  arena_range* arena_at_locked(std::uintptr_t address, std::size_t& index);
  const arena_range* arena_at_locked(std::uintptr_t address, std::size_t& index) const;
  void unmap_arena(std::uintptr_t base, std::size_t bytes) noexcept;
  // Pieces for `bytes`: spare ones (taken out of spare_) and a new allocation for the rest.
  void gather_locked(std::size_t bytes, std::vector<piece>& out, std::size_t& fresh,
                     std::vector<spare>& taken);
  void teardown(const retiring& r) noexcept; // unmap, free the range, release owned spares
  // Waits for the oldest retired segments until spare pieces fit in spare_budget().
  void bound_spare() noexcept;
  std::size_t spare_budget() const noexcept;
  event_handle retire_event() noexcept;
  std::vector<CUmemAccessDesc> access_locked() const;

  context_link& link_;
  fences& fe_;
  device_upstream fallback_;
  const std::size_t granularity_;
  const bool segments_;
  const std::size_t arena_page_;    // 0: no arena
  const std::size_t arena_reserve_; // bytes of address space per arena range
  const pool* pool_ = nullptr;
  std::atomic<bool> fd_handles_{false}; // pieces are created with POSIX_FILE_DESCRIPTOR
  mutable std::mutex mu_;               // guards everything below
  std::map<std::uintptr_t, mapping> live_;
  std::map<std::uintptr_t, arena_range> arenas_; // by base; never freed; newest: arena_newest_
  std::uintptr_t arena_newest_ = 0;
  std::deque<retiring> retiring_; // in retirement order: events complete in this order
  std::uint64_t retire_seq_ = 0;
  std::vector<spare> spare_;
  std::size_t spare_bytes_ = 0;
  std::vector<int> peers_;
  counters count_;
};

} // namespace gmem::shim
