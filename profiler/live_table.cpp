#include "profiler/live_table.h"

#include <bit>
#include <unordered_set>

namespace gmem::trace {

namespace w = layout::live_word;
using layout::load_word;
using layout::store_word;

namespace {

std::uint64_t pack_version(std::uint64_t counter, int device, alloc_kind kind) {
  return (counter & 0xffffffffu) |
         (static_cast<std::uint64_t>(static_cast<std::uint16_t>(device)) << 32) |
         (static_cast<std::uint64_t>(kind) << 48);
}

void write_slot(std::uint64_t* s, const live_entry& e) noexcept {
  const std::uint64_t v = load_word(s + w::version);
  store_word(s + w::version, (v & ~0xffffffffull) | ((v + 1) & 0xffffffffu)); // odd
  layout::store_release(s + w::address, e.address);
  layout::store_release(s + w::requested, e.requested);
  layout::store_release(s + w::rounded, e.rounded);
  layout::store_release(s + w::stream, e.stream);
  layout::store_release(s + w::tick, e.tick);
  layout::store_release(s + w::thread_stack, e.thread | static_cast<std::uint64_t>(e.stack_id)
                                                            << 32);
  layout::store_release(s + w::version, pack_version(v + 2, e.device, e.kind));
}

live_entry unpack(const std::uint64_t* words) {
  live_entry e;
  e.address = words[w::address];
  e.requested = words[w::requested];
  e.rounded = words[w::rounded];
  e.stream = words[w::stream];
  e.tick = words[w::tick];
  e.thread = static_cast<std::uint32_t>(words[w::thread_stack]);
  e.stack_id = static_cast<std::uint32_t>(words[w::thread_stack] >> 32);
  e.device = static_cast<std::int16_t>(static_cast<std::uint16_t>(words[w::version] >> 32));
  e.kind = static_cast<alloc_kind>(static_cast<std::uint8_t>(words[w::version] >> 48));
  return e;
}

} // namespace

live_table::live_table(std::uint64_t* slots, std::uint64_t capacity, std::uint64_t* overflow,
                       std::uint64_t* unmatched) noexcept
    : slots_(slots), mask_(capacity - 1), bits_(static_cast<unsigned>(std::countr_zero(capacity))),
      overflow_(overflow), unmatched_(unmatched) {}

bool live_table::insert(const live_entry& e) noexcept {
  if (e.address <= w::k_erasing) {
    layout::fetch_add(overflow_, 1);
    return false;
  }
  const std::uint64_t start = layout::hash_index(e.address, bits_);
  const std::uint64_t probes = mask_ < k_max_probe ? mask_ + 1 : k_max_probe;
  for (std::uint64_t i = 0; i < probes; ++i) {
    std::uint64_t* s = slots_ + ((start + i) & mask_) * w::count;
    std::uint64_t key = load_word(s + w::key);
    while (key == w::k_empty || key == w::k_tombstone) {
      if (layout::compare_exchange(s + w::key, key, e.address)) {
        write_slot(s, e);
        return true;
      }
    }
  }
  layout::fetch_add(overflow_, 1);
  return false;
}

bool live_table::erase(std::uintptr_t address, live_entry* erased) noexcept {
  const std::uint64_t start = layout::hash_index(address, bits_);
  const std::uint64_t probes = mask_ < k_max_probe ? mask_ + 1 : k_max_probe;
  for (std::uint64_t i = 0; address > w::k_erasing && i < probes; ++i) {
    std::uint64_t* s = slots_ + ((start + i) & mask_) * w::count;
    std::uint64_t key = load_word(s + w::key);
    if (key == w::k_empty) break;
    if (key != address || !layout::compare_exchange(s + w::key, key, w::k_erasing)) continue;
    // We own the slot: nobody else writes it until the key becomes a tombstone. Unpublishing
    // takes only the address word (inside the seqlock); the other words go stale.
    if (erased) {
      erased->address = address;
      erased->requested = load_word(s + w::requested);
      erased->rounded = load_word(s + w::rounded);
    }
    const std::uint64_t v = load_word(s + w::version);
    store_word(s + w::version, (v & ~0xffffffffull) | ((v + 1) & 0xffffffffu)); // odd
    layout::store_release(s + w::address, 0);
    layout::store_release(s + w::version, (v & ~0xffffffffull) | ((v + 2) & 0xffffffffu));
    layout::store_release(s + w::key, w::k_tombstone);
    return true;
  }
  layout::fetch_add(unmatched_, 1);
  return false;
}

bool live_table::is_valid() const {
  std::unordered_set<std::uint64_t> seen;
  for (std::uint64_t i = 0; i <= mask_; ++i) {
    const std::uint64_t* s = slots_ + i * w::count;
    const std::uint64_t key = load_word(s + w::key), address = load_word(s + w::address);
    if (load_word(s + w::version) & 1) return false; // quiescent: nobody mid-write
    if (address == 0) {
      if (key > w::k_erasing) return false; // claimed but never published
      continue;
    }
    if (address != key || !seen.insert(address).second) return false;
  }
  return true;
}

std::uint64_t read_live_table(const std::uint64_t* slots, std::uint64_t capacity,
                              const std::function<void(const live_entry&)>& emit) {
  std::uint64_t torn = 0;
  for (std::uint64_t i = 0; i < capacity; ++i) {
    const std::uint64_t* s = slots + i * w::count;
    bool done = false;
    for (int attempt = 0; attempt < 16 && !done; ++attempt) {
      std::uint64_t words[w::count];
      words[w::version] = layout::load_acquire(s + w::version);
      if (words[w::version] & 1) continue;
      for (unsigned k = w::address; k < w::count; ++k)
        words[k] = layout::load_acquire(s + k); // the re-check cannot move above
      if (load_word(s + w::version) != words[w::version]) continue;
      done = true;
      if (words[w::address] != 0) emit(unpack(words));
    }
    if (!done) ++torn;
  }
  return torn;
}

} // namespace gmem::trace
