// The memory a trace lives in, and how it grows. A trace starts small (its header and the first
// extent of each section) and allocates further extents as it fills: the file behind it grows
// with what the process really records, instead of being reserved for the worst case.
//
// The writer maps `map_bytes` of address space up front (nothing is backed beyond the file's
// end); allocate() moves the end with the backing's consent and publishes the new size in the
// header's total_bytes word only once the bytes are backed and zero, so a reader never looks at
// a byte that could fault. Extents that a table no longer uses (a shard rehashed into a larger
// or smaller one) become spare: neighbouring spares merge, and later extents are cut from the
// best-fitting spare before the file grows. The published size never shrinks; bytes backed
// ahead of it (prepare()) are given back by trim() at shutdown.
//
// Thread safety: allocate() and retire() may be called from any thread; they serialize on a
// mutex that only the writer's slow paths take (never a reader, never a hook's fast path).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace gmem::trace {

// Makes the bytes of a growing trace real: a shared-memory object grows its file and reserves
// the pages (so touching them can never raise SIGBUS on a full /dev/shm), or refuses.
class trace_backing {
public:
  // [0, new_total_bytes) must be backed by zero bytes (or what was written) when this returns
  // true. Called with the space's mutex held, never concurrently.
  virtual bool grow(std::uint64_t new_total_bytes) noexcept = 0;
  // The trace will soon need [0, total_bytes) backed: make it so off the calling thread, if
  // the backing can (the grow() that then asks for it finds it done and returns at once). Never
  // blocks; a request it cannot honour is dropped (grow() does the work later). Default: no-op.
  virtual void prepare(std::uint64_t total_bytes) noexcept { (void)total_bytes; }
  // Gives back what is backed beyond `total_bytes` (bytes prepared and never used); a later
  // grow() backs them again. Called with the space's mutex held. Default: no-op.
  virtual void trim(std::uint64_t total_bytes) noexcept { (void)total_bytes; }
  // Whether [0, total_bytes) is backed already, so that a grow() to it returns at once. Never
  // blocks. Default: true (a backing without a helper has nothing pending).
  virtual bool backed(std::uint64_t total_bytes) const noexcept {
    (void)total_bytes;
    return true;
  }

protected:
  ~trace_backing() = default;
};

class trace_space {
public:
  trace_space() = default;
  // `base`: the mapping, `map_bytes` long; the first `initial_bytes` are already backed.
  // `total_bytes` / `refused` / `flags`: header words kept current (see trace_layout.h).
  // Without a backing, the whole mapping is usable memory (tests, plain buffers).
  trace_space(std::byte* base, std::uint64_t map_bytes, std::uint64_t initial_bytes,
              std::uint64_t* total_bytes, std::uint64_t* refused, std::uint64_t* flags,
              trace_backing* backing) noexcept;
  trace_space(const trace_space&) = delete;
  trace_space& operator=(const trace_space&) = delete;

  std::byte* base() const noexcept { return base_; }
  std::uint64_t* words(std::uint64_t offset) const noexcept {
    return reinterpret_cast<std::uint64_t*>(base_ + offset);
  }
  // A zeroed extent of `bytes` (rounded up to 64), 64-byte aligned; its offset, or 0 when the
  // trace may not grow (counted in `refused`, the full flag set). Never throws. `late`, when
  // given, is set to whether the backing had to make the extent's bytes on this call (it was
  // not backed ahead: announced too late, or not at all).
  std::uint64_t allocate(std::uint64_t bytes, bool* late = nullptr) noexcept;
  // The next allocate() of `bytes` is near: asks the backing to have them backed ahead of it,
  // off the calling thread (trace_backing::prepare), so the allocating hook does not take the
  // growth's system calls and first touches. Called at most once per extent it announces.
  void prepare(std::uint64_t bytes) noexcept;
  // `offset` (from allocate) is no longer used by the writer; later allocate() calls may hand
  // out its bytes again (zeroed then).
  void retire(std::uint64_t offset, std::uint64_t bytes) noexcept;
  // Gives back the backing's bytes beyond the published size (trace_backing::trim): what
  // prepare() made ready and no allocate() used. Growth after it works as before.
  void trim() noexcept;
  std::uint64_t used_bytes() const noexcept;

private:
  std::byte* base_ = nullptr;
  std::uint64_t map_bytes_ = 0;
  std::uint64_t* total_bytes_ = nullptr;
  std::uint64_t* refused_ = nullptr;
  std::uint64_t* flags_ = nullptr;
  trace_backing* backing_ = nullptr;
  mutable std::mutex mu_;
  std::uint64_t end_ = 0; // under mu_: bytes handed out (or spare) from the start
  struct spare {
    std::uint64_t offset, bytes;
  };
  std::vector<spare> spares_; // under mu_: sorted by offset, never touching each other
};

} // namespace gmem::trace
