// Where segments come from. The interposer implements it over the real driver
// (cuMemAlloc_v2 / cuMemFree_v2, or a reserved+mapped range); tests use a fake that places
// segments back to back so that a block crossing a segment boundary would go unnoticed by
// address arithmetic alone.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gmem {

// Obtains and releases segments. The pool never calls it with its lock held: the driver takes
// its own locks and may, on another thread, sit inside one of our hooks waiting for the pool.
class upstream {
public:
  virtual ~upstream() = default;
  // A new segment of exactly `bytes` (a multiple of 512), at least 256-byte aligned
  // (512-byte aligned gives 512-byte aligned blocks). 0 = out of memory.
  virtual std::uintptr_t map(std::size_t bytes) noexcept = 0;
  // Releases a segment returned by map(), with the same size; or any arena_page()-aligned
  // range of arena memory, however many extend() calls mapped it.
  virtual void unmap(std::uintptr_t base, std::size_t bytes) noexcept = 0;

  // Arenas (optional; pool_options::arena): address space reserved up front and mapped in
  // pages, so that a pool grows its arena where it ends and free space merges across
  // growths. The unit of mapping and unmapping; a power of two; 0 = no arena support.
  virtual std::size_t arena_page() const noexcept { return 0; }
  // Maps `bytes` (a multiple of arena_page()) of arena memory; returns its address, a multiple
  // of arena_page(), or 0 = out of memory. At `at` when [at, at + bytes) is reserved arena
  // address space with nothing mapped (the pool passes its arena's end, 0 for none yet),
  // elsewhere otherwise.
  virtual std::uintptr_t extend(std::uintptr_t /*at*/, std::size_t /*bytes*/) noexcept { return 0; }

  // Stitching (optional; pool_options::stitch): maps the physical pages behind the arena
  // addresses pages[0 .. count) (each arena_page()-aligned and mapped by extend()), in that
  // order, into a fresh range of address space; returns its base, a multiple of arena_page(),
  // or 0 = not possible. The pages stay mapped in the arena: the pool hands out no arena
  // block on them while the range lives.
  virtual std::uintptr_t stitch(const std::uintptr_t* /*pages*/, std::size_t /*count*/) noexcept {
    return 0;
  }
  // Gives back a range stitch() returned (count pages), without the pages' memory; device
  // work issued before the call may still use the range, so it goes once that is done.
  virtual void unstitch(std::uintptr_t /*base*/, std::size_t /*count*/) noexcept {}
  virtual bool can_stitch() const noexcept { return false; }
};

} // namespace gmem
