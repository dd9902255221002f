// Deduplicating store for immutable sequences: call stacks (sequences of instruction pointers)
// and strings (labels, module paths, the command line). Each distinct sequence is stored once
// and named by a small id (slot index + 1; 0 = none), so an event or live allocation carries
// one 32-bit id instead of its whole stack.
//
// A hash table of 16-byte slots points into an append-only arena. Writers are lock-free: a
// slot is claimed by CAS on its hash word, its arena range by fetch_add, and published by a
// release store of its ref word (offset, length, status). Invariant: a ready slot's arena range
// is inside the arena and never changes again, so readers may copy it once they have seen the
// ready status (acquire). A writer that finds the same hash still being written waits a bounded
// number of spins, then keeps probing (the sequence may be stored twice; both ids are valid).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "profiler/trace_layout.h"

namespace gmem::trace {

class intern_table {
public:
  static constexpr std::uint64_t k_max_probe = 64;

  intern_table() = default;
  // slots: capacity * 2 words (capacity a power of two); arena: arena_bytes bytes, holding
  // elements of element_bytes (8 for stacks, 1 for strings). Counters live in the header.
  intern_table(std::uint64_t* slots, std::uint64_t capacity, std::byte* arena,
               std::uint64_t arena_bytes, std::uint32_t element_bytes, std::uint64_t* count,
               std::uint64_t* overflow, std::uint64_t* used) noexcept;

  bool is_open() const noexcept { return slots_ != nullptr; }
  // Stores `count` elements (count * element_bytes bytes at data) once; returns their id, or 0
  // when there is no room (counted in overflow). count must be >= 1 and < 2^24.
  std::uint32_t intern(const void* data, std::uint64_t count) noexcept;
  bool is_valid() const;

private:
  std::uint64_t* slots_ = nullptr;
  std::uint64_t mask_ = 0;
  unsigned bits_ = 0;
  std::byte* arena_ = nullptr;
  std::uint64_t arena_elements_ = 0;
  std::uint32_t element_bytes_ = 1;
  std::uint64_t* count_ = nullptr;
  std::uint64_t* overflow_ = nullptr;
  std::uint64_t* used_ = nullptr;
};

std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept; // never 0

// Reader: calls emit(id, bytes) for every ready slot whose range lies inside the arena, while
// the ranges emitted so far fit in the arena together; returns the ready slots refused
// (corrupt).
std::uint64_t
read_intern_table(const std::uint64_t* slots, std::uint64_t capacity, const std::byte* arena,
                  std::uint64_t arena_bytes, std::uint32_t element_bytes,
                  const std::function<void(std::uint32_t, std::span<const std::byte>)>& emit);

} // namespace gmem::trace
