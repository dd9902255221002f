// The live allocation table (and, with the same code, the live segment table): every
// outstanding allocation, so a tool attaching mid-run sees all of them, not only the events
// since it attached.
//
// Shards (trace_layout.h, section_kind::shards): an address belongs to one shard, and each
// shard is an open-addressing table with linear probing over a power-of-two array of 64-byte
// slots in the trace. A shard is sized to what it holds: it starts small and, once half its
// slots are used (live or tombstones), is rehashed into a fresh extent of at least three times
// its live entries, which also clears its tombstones, so a long run that frees as much as it
// allocates keeps a small, cache-resident table.
//
// Writers take the shard's spin lock (process-private; readers never take it): a lock costs
// the one atomic operation the lock-free claim of a slot did and makes rehashing simple.
// Readers see each slot through its seqlock (version word, odd while writing) and a shard's
// table through the section's dir_version (odd while a table is being replaced): a reader
// that saw the directory change retries.
// Invariants (is_valid(), with no writer running): every published address is its slot's
// key, less the tag bit 63 of kinds filed apart (live_key()), is in its shard, is found from its
// hash before the first empty slot, and is published once; each shard's live and used counts match
// its slots. When a shard cannot grow (the trace is full) and has no free slot within k_max_probe,
// the allocation is counted in `overflow` and not stored: counted, never corrupting another slot.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>

#include "common/spin_mutex.h"
#include "profiler/format/trace_layout.h"
#include "profiler/format/trace_space.h"
#include "profiler/format/trace_types.h"

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
  // Freed after the program's own code had ended (an interpreter's shutdown released it): the
  // slot stays published with this flag so the exit report still sees what the program held.
  bool held = false;
};

class live_table {
public:
  static constexpr std::uint64_t k_max_probe = 512;

  live_table() = default;
  // Formats the section `id` of the trace in `space`: `shards` tables (<= k_max_extents) of
  // `min_slots` slots each, growing to at most `max_slots` each (powers of two applied).
  // Returns false when the space has no room for the first tables.
  bool open(trace_space* space, layout::header* h, layout::section_id id, std::uint32_t shards,
            std::uint64_t min_slots, std::uint64_t max_slots, std::uint64_t* overflow,
            std::uint64_t* unmatched) noexcept;

  bool is_open() const noexcept { return shards_ != nullptr; }
  // Stores `e` under `key` (> layout::live_word::k_reserved; the address, or trace_types.h's
  // live_key() for kinds filed apart). false: no room (counted).
  bool insert(const live_entry& e, std::uintptr_t key) noexcept;
  bool insert(const live_entry& e) noexcept { return insert(e, e.address); }
  // Removes the entry filed under `key`; copies its address, requested and rounded sizes into
  // *erased when given. false: not present (counted in unmatched).
  bool erase(std::uintptr_t key, live_entry* erased) noexcept;
  // Marks the entry filed under `key` held (live_entry::held) instead of removing it; copies
  // it like erase. A later insert under the same key replaces the held slot. false: not
  // present (counted in unmatched).
  bool hold(std::uintptr_t key, live_entry* held) noexcept;
  // Entries stored now (a racy sum while writers run).
  std::uint64_t live_count() const noexcept;
  bool is_valid() const;

private:
  struct alignas(64) shard {
    spin_lock mu; // process-private; readers never take it
    std::uint64_t* slots = nullptr;
    std::uint64_t offset = 0;
    std::uint64_t capacity = 0;
    unsigned bits = 0;
    std::uint64_t live = 0; // under mu
    std::uint64_t used = 0; // under mu: slots not empty (live or tombstone)
    bool stuck = false;     // under mu: the trace refused to grow this shard
  };
  bool rehash(std::uint32_t index, shard& s) noexcept; // with s.mu held
  std::uint64_t* find_free(const shard& s, std::uintptr_t address) const noexcept;
  std::uint64_t* find(const shard& s, std::uintptr_t address) const noexcept;
  void erase_slot(shard& s, std::uint64_t* slot) noexcept; // with s.mu held

  trace_space* space_ = nullptr;
  layout::section* section_ = nullptr;
  layout::extent* dir_ = nullptr;
  std::unique_ptr<shard[]> shards_;
  std::uint32_t shard_count_ = 0;
  std::uint64_t min_slots_ = 0, max_slots_ = 0;
  std::uint64_t* overflow_ = nullptr;
  std::uint64_t* unmatched_ = nullptr;
  std::atomic<bool> any_held_{false}; // once set, insert replaces a held slot at its address
};

// Reader: calls `emit` for every published slot of a shards section read consistently. `base`
// / `size`: the trace image; extents outside it or malformed are skipped and counted in
// *corrupt. Returns the slots that stayed mid-update through bounded retries (torn).
std::uint64_t read_live_table(const std::byte* base, std::uint64_t size,
                              const layout::section& section, const layout::extent* dir,
                              const std::uint64_t* dir_version,
                              const std::function<void(const live_entry&)>& emit,
                              std::uint64_t* corrupt);

} // namespace gmem::trace
