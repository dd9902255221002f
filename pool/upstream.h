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
  // Releases a segment returned by map(), with the same size.
  virtual void unmap(std::uintptr_t base, std::size_t bytes) noexcept = 0;
};

} // namespace gmem
