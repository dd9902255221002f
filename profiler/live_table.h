// The live allocation table (and, with the same code, the live segment table): every
// outstanding allocation, so a tool attaching mid-run sees all of them, not only the events
// since it attached.
//
// Open addressing with linear probing over a power-of-two array of 64-byte slots, probed at
// most k_max_probe slots from the key's hash. Writers are lock-free: a slot is claimed with a
// CAS on its key word (empty/tombstone -> address) and released through "erasing" to
// tombstone. Readers see each slot through its seqlock (version word, odd while writing).
// Invariants (checked by is_valid() when no writer runs):
//   - a key word is never set back to empty, so a key is found before the first empty slot of
//     its probe sequence;
//   - a slot's published address is 0 or equal to its key; no address is published twice.
// There is no shared count (two atomic adds per pair cost more than the rest of an insert):
// readers count the published slots.
// When no slot is free within k_max_probe, the allocation is counted in `overflow` and not
// stored: counted, never silently dropped, never corrupting another slot.
#pragma once

#include <cstdint>
#include <functional>

#include "profiler/trace_layout.h"
#include "profiler/trace_types.h"

namespace gmem::trace {

struct live_entry {
  std::uintptr_t address = 0;
  std::uint64_t requested = 0;
  std::uint64_t rounded = 0;
  std::uintptr_t stream = 0;
  std::uint64_t tick = 0;
  std::uint32_t thread = 0;
  std::uint32_t stack_id = 0;
  int device = 0;
  alloc_kind kind = alloc_kind::device;
};

class live_table {
public:
  static constexpr std::uint64_t k_max_probe = 512;

  live_table() = default;
  // `slots`: capacity * 8 words; capacity a power of two. The counters live in the header.
  live_table(std::uint64_t* slots, std::uint64_t capacity, std::uint64_t* overflow,
             std::uint64_t* unmatched) noexcept;

  bool is_open() const noexcept { return slots_ != nullptr; }
  // Stores `e` (e.address >= 3). false: no slot free within k_max_probe (counted in overflow).
  bool insert(const live_entry& e) noexcept;
  // Removes `address`; copies its address, requested and rounded sizes into *erased when
  // given. false: not present
  // (counted in unmatched).
  bool erase(std::uintptr_t address, live_entry* erased) noexcept;
  bool is_valid() const;

private:
  std::uint64_t* slots_ = nullptr;
  std::uint64_t mask_ = 0;
  unsigned bits_ = 0;
  std::uint64_t* overflow_ = nullptr;
  std::uint64_t* unmatched_ = nullptr;
};

// Reader: calls `emit` for every published slot read consistently; returns the number of slots
// that stayed mid-update through bounded retries (torn).
std::uint64_t read_live_table(const std::uint64_t* slots, std::uint64_t capacity,
                              const std::function<void(const live_entry&)>& emit);

} // namespace gmem::trace
