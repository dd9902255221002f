// Deduplicating store for immutable sequences: call stacks (sequences of instruction pointers)
// and strings (labels, module paths, the command line). Each distinct sequence is stored once
// and named by a small id (0 = none), so an event or live allocation carries one 32-bit id
// instead of its whole stack.
//
// Two sections of the trace: hash tables of 16-byte slots added as levels (section_kind::
// levels: a level twice the size of the last once the last is half full, so ids never move)
// and an arena of chunks holding the sequences (section_kind::arena). Lookups are lock-free
// and read only the trace: newest level first, a slot matches when its hash, length and bytes
// do. Storing a new sequence takes a process-private spin lock (a new stack is rare: a
// program has a few thousand call sites). Invariant: a slot's ref is written before its hash
// (release), and a slot with a hash never changes again, so a lookup or reader that sees the
// hash sees the sequence.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "common/spin_mutex.h"
#include "profiler/format/trace_layout.h"
#include "profiler/format/trace_space.h"

namespace gmem::trace {

class intern_table {
public:
  static constexpr std::uint64_t k_max_probe = 64;

  intern_table() = default;
  intern_table(const intern_table&) = delete;
  intern_table& operator=(const intern_table&) = delete;
  // Formats sections `slots_id` and `arena_id` of the trace in `space`: a first level of
  // `first_slots` slots growing to `max_slots` in all, an arena of `first_elements` elements
  // of `element_bytes` (8 for stacks, 1 for strings) growing to `max_elements`. Counters live
  // in the header. Returns false when the space has no room for the first extents.
  bool open(trace_space* space, layout::header* h, layout::section_id slots_id,
            layout::section_id arena_id, std::uint32_t element_bytes, std::uint64_t first_slots,
            std::uint64_t max_slots, std::uint64_t first_elements, std::uint64_t max_elements,
            std::uint64_t* count, std::uint64_t* overflow, std::uint64_t* used) noexcept;

  bool is_open() const noexcept { return space_ != nullptr; }
  // Stores `count` elements (count * element_bytes bytes at data) once; returns their id, or 0
  // when there is no room (counted in overflow). count must be >= 1 and < 2^24.
  std::uint32_t intern(const void* data, std::uint64_t count) noexcept;
  // The same, with hash_bytes(data, count * element_bytes) already computed by the caller.
  std::uint32_t intern(const void* data, std::uint64_t count, std::uint64_t hash) noexcept;
  bool is_valid() const;

private:
  struct level {
    std::uint64_t* slots = nullptr;
    std::uint64_t capacity = 0;
    std::uint64_t first_id = 0; // id of slot 0
    std::uint64_t stored = 0;   // under mu_
  };
  std::uint32_t find(std::uint64_t hash, const void* data, std::uint64_t count) const noexcept;
  bool add_level() noexcept;                                  // with mu_ held
  std::uint64_t arena_claim(std::uint64_t elements) noexcept; // with mu_ held: position or 0

  trace_space* space_ = nullptr;
  layout::section* slots_section_ = nullptr;
  layout::extent* slots_dir_ = nullptr;
  layout::section* arena_section_ = nullptr;
  layout::extent* arena_dir_ = nullptr;
  std::uint32_t element_bytes_ = 1;
  std::uint64_t max_slots_ = 0, max_elements_ = 0;
  level levels_[layout::k_max_extents];
  std::atomic<std::uint32_t> level_count_{0};
  spin_mutex mu_;
  std::uint64_t arena_next_ = 0, arena_end_ = 0;   // under mu_: free positions of the last chunk
  std::uint64_t arena_total_ = 0;                  // under mu_: elements in all chunks
  std::uint64_t arena_first_ = 0, arena_last_ = 0; // under mu_: first and last chunk sizes
  std::uint32_t arena_chunks_ = 0;                 // under mu_
  bool arena_full_ = false;                        // under mu_: no more chunks to be had
  std::uint64_t* count_ = nullptr;
  std::uint64_t* overflow_ = nullptr;
  std::uint64_t* used_ = nullptr;
};

std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept; // never 0

// Reader: calls emit(id, bytes) for every ready slot whose sequence lies inside one chunk of
// the arena, while the sequences emitted so far fit in the arena together; returns the slots
// and extents refused (corrupt). `base` / `size`: the trace image.
std::uint64_t
read_intern_table(const std::byte* base, std::uint64_t size, const layout::section& slots,
                  const layout::extent* slots_dir, const layout::section& arena,
                  const layout::extent* arena_dir, std::uint32_t element_bytes,
                  const std::function<void(std::uint32_t, std::span<const std::byte>)>& emit);

} // namespace gmem::trace
