#include "profiler/format/live_table.h"

#include <algorithm>
#include <bit>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace gmem::trace {

namespace w = layout::live_word;
using layout::load_word;
using layout::store_word;

namespace {

constexpr std::uint64_t k_slot_bytes = w::count * 8;

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
  e.held = (words[w::version] & w::k_held_bit) != 0;
  return e;
}

void publish_extent(layout::section* section, layout::extent* e, std::uint64_t offset,
                    std::uint64_t capacity) noexcept {
  const std::uint64_t v = load_word(&section->dir_version);
  store_word(&section->dir_version, v + 1); // odd: a reader that overlaps retries
  layout::store_release(&e->offset, offset);
  layout::store_release(&e->capacity, capacity);
  layout::store_release(&section->dir_version, v + 2);
}

} // namespace

bool live_table::open(trace_space* space, layout::header* h, layout::section_id id,
                      std::uint32_t shards, std::uint64_t min_slots, std::uint64_t max_slots,
                      std::uint64_t* overflow, std::uint64_t* unmatched) noexcept {
  space_ = space;
  section_ = &h->sections[id];
  dir_ = h->extents[id];
  shard_count_ = std::clamp<std::uint32_t>(shards, 1, layout::k_max_extents);
  max_slots_ = std::bit_ceil(std::max<std::uint64_t>(max_slots, 16));
  min_slots_ = std::min(std::bit_ceil(std::max<std::uint64_t>(min_slots, 16)), max_slots_);
  overflow_ = overflow;
  unmatched_ = unmatched;
  section_->capacity = max_slots_ * shard_count_;
  section_->record_bytes = k_slot_bytes;
  try {
    shards_ = std::make_unique<shard[]>(shard_count_);
  } catch (...) {
    return false;
  }
  for (std::uint32_t i = 0; i < shard_count_; ++i) {
    const std::uint64_t offset = space_->allocate(min_slots_ * k_slot_bytes);
    if (offset == 0) {
      shards_.reset();
      return false;
    }
    shard& s = shards_[i];
    s.offset = offset;
    s.slots = space_->words(offset);
    s.capacity = min_slots_;
    s.bits = static_cast<unsigned>(std::countr_zero(min_slots_));
    dir_[i] = {offset, min_slots_};
  }
  section_->extent_count = shard_count_; // before the header is published (magic)
  return true;
}

std::uint64_t* live_table::find_free(const shard& s, std::uintptr_t address) const noexcept {
  const std::uint64_t mask = s.capacity - 1;
  const std::uint64_t start = layout::hash_index(address, s.bits);
  const std::uint64_t probes = std::min(s.capacity, k_max_probe);
  for (std::uint64_t i = 0; i < probes; ++i) {
    std::uint64_t* slot = s.slots + ((start + i) & mask) * w::count;
    if (load_word(slot + w::key) <= w::k_tombstone) return slot;
  }
  return nullptr;
}

bool live_table::rehash(std::uint32_t index, shard& s) noexcept {
  // Room for the live entries at a load of at most 1/3: a table that outgrew half full
  // doubles, one emptied by frees shrinks back.
  const std::uint64_t capacity =
      std::clamp(std::bit_ceil(std::max<std::uint64_t>(3 * s.live, 1)), min_slots_, max_slots_);
  if (s.stuck || (capacity <= s.capacity && s.used - s.live < s.capacity / 8))
    return false; // nothing to gain, or the trace is full
  const std::uint64_t offset = space_->allocate(capacity * k_slot_bytes);
  if (offset == 0) {
    s.stuck = true; // counted once in the header; the shard keeps its table
    return false;
  }
  shard fresh;
  fresh.offset = offset;
  fresh.slots = space_->words(offset);
  fresh.capacity = capacity;
  fresh.bits = static_cast<unsigned>(std::countr_zero(capacity));
  for (std::uint64_t i = 0; i < s.capacity; ++i) {
    const std::uint64_t* from = s.slots + i * w::count;
    const std::uint64_t key = load_word(from + w::key);
    if (key <= w::k_tombstone) continue;
    std::uint64_t* to = find_free(fresh, key); // never null: >= 3 slots per live entry
    store_word(to + w::key, key);
    for (unsigned k = w::address; k < w::count; ++k)
      store_word(to + k, load_word(from + k));
    store_word(to + w::version, (load_word(from + w::version) & ~0xffffffffull) | 2);
    ++fresh.used;
  }
  publish_extent(section_, &dir_[index], offset, capacity);
  space_->retire(s.offset, s.capacity * k_slot_bytes);
  s.offset = fresh.offset;
  s.slots = fresh.slots;
  s.capacity = fresh.capacity;
  s.bits = fresh.bits;
  s.used = fresh.used;
  return true;
}

bool live_table::insert(const live_entry& e, std::uintptr_t key) noexcept {
  if (e.address <= w::k_reserved || key <= w::k_reserved) {
    layout::fetch_add(overflow_, 1);
    return false;
  }
  const std::uint32_t index = layout::shard_of(key, shard_count_);
  shard& s = shards_[index];
  std::lock_guard lock(s.mu);
  if (any_held_.load(std::memory_order_relaxed)) {
    // The key of a held slot was handed out again: the new allocation replaces it.
    if (std::uint64_t* old = find(s, key)) erase_slot(s, old);
  }
  std::uint64_t* slot = find_free(s, key);
  if (slot == nullptr && rehash(index, s)) slot = find_free(s, key);
  if (slot == nullptr) {
    layout::fetch_add(overflow_, 1);
    return false;
  }
  if (load_word(slot + w::key) == w::k_empty) ++s.used;
  store_word(slot + w::key, key);
  write_slot(slot, e);
  // Under the shard's lock; live_count() reads it from the sampler without one.
  __atomic_store_n(&s.live, s.live + 1, __ATOMIC_RELAXED);
  if (s.used > s.capacity / 2) rehash(index, s);
  return true;
}

std::uint64_t* live_table::find(const shard& s, std::uintptr_t address) const noexcept {
  const std::uint64_t mask = s.capacity - 1;
  const std::uint64_t start = layout::hash_index(address, s.bits);
  const std::uint64_t probes = std::min(s.capacity, k_max_probe);
  for (std::uint64_t i = 0; i < probes; ++i) {
    std::uint64_t* slot = s.slots + ((start + i) & mask) * w::count;
    const std::uint64_t key = load_word(slot + w::key);
    if (key == w::k_empty) break;
    if (key == address) return slot;
  }
  return nullptr;
}

void live_table::erase_slot(shard& s, std::uint64_t* slot) noexcept {
  // Unpublishing takes only the address word (inside the seqlock); the others go stale.
  const std::uint64_t v = load_word(slot + w::version);
  store_word(slot + w::version, (v & ~0xffffffffull) | ((v + 1) & 0xffffffffu)); // odd
  layout::store_release(slot + w::address, 0);
  layout::store_release(slot + w::version,
                        (v & ~0xffffffffull & ~w::k_held_bit) | ((v + 2) & 0xffffffffu));
  store_word(slot + w::key, w::k_tombstone);
  __atomic_store_n(&s.live, s.live - 1, __ATOMIC_RELAXED);
  // A tombstone followed by an empty slot ends no key's probe path (every slot from a key's
  // home to the key is in use), so it and the tombstones before it become empty: a shard with
  // few live entries keeps few tombstones and rarely rehashes.
  const std::uint64_t mask = s.capacity - 1;
  std::uint64_t at = static_cast<std::uint64_t>(slot - s.slots) / w::count;
  if (load_word(s.slots + ((at + 1) & mask) * w::count + w::key) == w::k_empty) {
    for (std::uint64_t n = 0; n < s.capacity; ++n, at = (at - 1) & mask) {
      std::uint64_t* probe = s.slots + at * w::count + w::key;
      if (load_word(probe) != w::k_tombstone) break;
      store_word(probe, w::k_empty);
      --s.used;
    }
  }
}

bool live_table::erase(std::uintptr_t address, live_entry* erased) noexcept {
  // `address` is the key (live_key()); the published address is what *erased gets.
  if (address > w::k_reserved) {
    shard& s = shards_[layout::shard_of(address, shard_count_)];
    std::lock_guard lock(s.mu);
    if (std::uint64_t* slot = find(s, address)) {
      if (erased) {
        erased->address = load_word(slot + w::address);
        erased->requested = load_word(slot + w::requested);
        erased->rounded = load_word(slot + w::rounded);
      }
      erase_slot(s, slot);
      return true;
    }
  }
  layout::fetch_add(unmatched_, 1);
  return false;
}

bool live_table::hold(std::uintptr_t address, live_entry* held) noexcept {
  if (address > w::k_reserved) {
    shard& s = shards_[layout::shard_of(address, shard_count_)];
    std::lock_guard lock(s.mu);
    if (std::uint64_t* slot = find(s, address)) {
      if (held) {
        held->address = load_word(slot + w::address);
        held->requested = load_word(slot + w::requested);
        held->rounded = load_word(slot + w::rounded);
      }
      any_held_.store(true, std::memory_order_relaxed);
      const std::uint64_t v = load_word(slot + w::version);
      store_word(slot + w::version, (v & ~0xffffffffull) | ((v + 1) & 0xffffffffu)); // odd
      layout::store_release(slot + w::version,
                            (v & ~0xffffffffull) | w::k_held_bit | ((v + 2) & 0xffffffffu));
      return true;
    }
  }
  layout::fetch_add(unmatched_, 1);
  return false;
}

std::uint64_t live_table::live_count() const noexcept {
  std::uint64_t n = 0;
  for (std::uint32_t i = 0; i < shard_count_; ++i)
    n += __atomic_load_n(&shards_[i].live, __ATOMIC_RELAXED);
  return n;
}

bool live_table::is_valid() const {
  std::unordered_set<std::uint64_t> seen;
  for (std::uint32_t i = 0; i < shard_count_; ++i) {
    const shard& s = shards_[i];
    if (dir_[i].offset != s.offset || dir_[i].capacity != s.capacity) return false;
    std::uint64_t live = 0, used = 0;
    for (std::uint64_t k = 0; k < s.capacity; ++k) {
      const std::uint64_t* slot = s.slots + k * w::count;
      const std::uint64_t key = load_word(slot + w::key), address = load_word(slot + w::address);
      if (load_word(slot + w::version) & 1) return false; // quiescent: nobody mid-write
      used += key != w::k_empty;
      if (key <= w::k_tombstone) {
        if (address != 0) return false;
        continue;
      }
      if ((key & ~(std::uint64_t{1} << 63)) != address || !seen.insert(key).second) return false;
      if (layout::shard_of(key, shard_count_) != i) return false;
      for (std::uint64_t p = layout::hash_index(key, s.bits);; p = (p + 1) & (s.capacity - 1)) {
        if (p == k) break;
        if (load_word(s.slots + p * w::count + w::key) == w::k_empty) return false;
      }
      ++live;
    }
    if (live != s.live || used != s.used) return false;
  }
  return true;
}

std::uint64_t read_live_table(const std::byte* base, std::uint64_t size,
                              const layout::section& section, const layout::extent* dir,
                              const std::uint64_t* dir_version,
                              const std::function<void(const live_entry&)>& emit,
                              std::uint64_t* corrupt) {
  const std::uint32_t shards = std::min(section.extent_count, layout::k_max_extents);
  std::vector<live_entry> found;
  std::uint64_t torn = 0, bad = 0;
  bool consistent = false;
  for (int pass = 0; pass < 16; ++pass) {
    found.clear();
    torn = bad = 0;
    const std::uint64_t v1 = layout::load_acquire(dir_version);
    std::uint64_t slots_seen = 0;
    for (std::uint32_t i = 0; i < shards; ++i) {
      const std::uint64_t offset = layout::load_acquire(&dir[i].offset);
      const std::uint64_t capacity = layout::load_acquire(&dir[i].capacity);
      // Inside the image, a power of two, and all shards together no larger than the image:
      // a hostile directory naming one huge extent many times costs nothing.
      if (offset < layout::k_header_bytes || offset % 64 != 0 || offset > size || capacity == 0 ||
          (capacity & (capacity - 1)) != 0 || capacity > (size - offset) / k_slot_bytes ||
          capacity > size / k_slot_bytes - slots_seen) {
        ++bad;
        continue;
      }
      slots_seen += capacity;
      const auto* slots = reinterpret_cast<const std::uint64_t*>(base + offset);
      for (std::uint64_t k = 0; k < capacity; ++k) {
        const std::uint64_t* s = slots + k * w::count;
        bool done = false;
        for (int attempt = 0; attempt < 16 && !done; ++attempt) {
          std::uint64_t words[w::count];
          words[w::version] = layout::load_acquire(s + w::version);
          if (words[w::version] & 1) continue;
          for (unsigned j = w::address; j < w::count; ++j)
            words[j] = layout::load_acquire(s + j); // the re-check cannot move above
          if (load_word(s + w::version) != words[w::version]) continue;
          done = true;
          if (words[w::address] != 0) found.push_back(unpack(words));
        }
        if (!done) ++torn;
      }
    }
    if ((v1 & 1) == 0 && layout::load_acquire(dir_version) == v1) {
      consistent = true;
      break;
    }
  }
  if (!consistent) { // tables kept changing under every pass: the last one, without repeats
    ++torn;
    std::sort(found.begin(), found.end(), [](const live_entry& a, const live_entry& b) {
      return live_key(a.address, a.kind) < live_key(b.address, b.kind);
    });
    found.erase(std::unique(found.begin(), found.end(),
                            [](const live_entry& a, const live_entry& b) {
                              return live_key(a.address, a.kind) == live_key(b.address, b.kind);
                            }),
                found.end());
  }
  for (const auto& e : found)
    emit(e);
  if (corrupt) *corrupt += bad;
  return torn;
}

} // namespace gmem::trace
