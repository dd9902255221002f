#include "profiler/format/intern_table.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <mutex>

namespace gmem::trace {

namespace sw = layout::slot_word;
using layout::load_acquire;
using layout::load_word;

namespace {
constexpr std::uint64_t k_slot_bytes = sw::count * 8;
constexpr std::uint64_t k_min_level = 64;

inline std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h = (h ^ v) * 0x100000001b3ull;
  return h ^ (h >> 29);
}
inline std::uint64_t word_at(const unsigned char* p) noexcept {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
} // namespace

// Four independent lanes over 32-byte blocks: a stack of 33 words is hashed in about a quarter
// of the time one chain of multiplies takes, and every stack capture hashes one.
std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t a = 0xcbf29ce484222325ull, b = 0x9e3779b97f4a7c15ull, c = 0xc2b2ae3d27d4eb4full,
                d = 0x165667b19e3779f9ull;
  std::size_t i = 0;
  for (; i + 32 <= bytes; i += 32) {
    a = mix(a, word_at(p + i));
    b = mix(b, word_at(p + i + 8));
    c = mix(c, word_at(p + i + 16));
    d = mix(d, word_at(p + i + 24));
  }
  for (; i + 8 <= bytes; i += 8)
    a = mix(a, word_at(p + i));
  for (; i < bytes; ++i)
    a = (a ^ p[i]) * 0x100000001b3ull;
  std::uint64_t h = mix(mix(mix(mix(a, b), c), d), bytes);
  h ^= h >> 32;
  return h == 0 ? 1 : h;
}

bool intern_table::open(trace_space* space, layout::header* h, layout::section_id slots_id,
                        layout::section_id arena_id, std::uint32_t element_bytes,
                        std::uint64_t first_slots, std::uint64_t max_slots,
                        std::uint64_t first_elements, std::uint64_t max_elements,
                        std::uint64_t* count, std::uint64_t* overflow,
                        std::uint64_t* used) noexcept {
  space_ = space;
  slots_section_ = &h->sections[slots_id];
  slots_dir_ = h->extents[slots_id];
  arena_section_ = &h->sections[arena_id];
  arena_dir_ = h->extents[arena_id];
  element_bytes_ = element_bytes;
  max_slots_ = std::max(max_slots, k_min_level);
  max_elements_ = std::max<std::uint64_t>(max_elements, 1);
  count_ = count;
  overflow_ = overflow;
  used_ = used;
  slots_section_->capacity = max_slots_;
  slots_section_->record_bytes = k_slot_bytes;
  arena_section_->capacity = max_elements_;
  arena_section_->record_bytes = element_bytes_;
  std::lock_guard lock(mu_);
  levels_[0].capacity = std::min(std::bit_ceil(std::max(first_slots, k_min_level)), max_slots_);
  if (!add_level()) return false;
  arena_first_ = std::min(std::max<std::uint64_t>(first_elements, 1), max_elements_);
  return arena_claim(0) != 0;
}

bool intern_table::add_level() noexcept {
  const std::uint32_t n = level_count_.load(std::memory_order_relaxed);
  if (n >= layout::k_max_extents) return false;
  std::uint64_t capacity = levels_[0].capacity, first_id = 1;
  if (n > 0) {
    const level& last = levels_[n - 1];
    first_id = last.first_id + last.capacity;
    capacity = std::bit_floor(std::min(2 * last.capacity, max_slots_ - (first_id - 1)));
    if (capacity < k_min_level || first_id - 1 + capacity > 0xffffffffull) return false;
  }
  const std::uint64_t offset = space_->allocate(capacity * k_slot_bytes);
  if (offset == 0) return false;
  level& l = levels_[n];
  l.slots = space_->words(offset);
  l.capacity = capacity;
  l.first_id = first_id;
  l.stored = 0;
  layout::store_release(&slots_dir_[n].offset, offset);
  layout::store_release(&slots_dir_[n].capacity, capacity);
  __atomic_store_n(&slots_section_->extent_count, n + 1, __ATOMIC_RELEASE);
  level_count_.store(n + 1, std::memory_order_release);
  return true;
}

// A new arena chunk when `elements` do not fit in the last one: twice the last (at least
// `elements`), never past max_elements_, and for strings never past 4 GiB (positions are 32
// bits). arena_claim(0) only makes sure the first chunk exists. Positions are never 0 (the
// header comes first), so 0 means no room.
std::uint64_t intern_table::arena_claim(std::uint64_t elements) noexcept {
  if (arena_chunks_ == 0 || arena_end_ - arena_next_ < elements) {
    if (arena_full_ || arena_chunks_ >= layout::k_max_extents) return 0;
    const std::uint64_t want =
        std::min(std::max(arena_chunks_ == 0 ? arena_first_ : 2 * arena_last_, elements),
                 max_elements_ - arena_total_);
    const std::uint64_t offset = want < elements ? 0 : space_->allocate(want * element_bytes_);
    if (offset == 0 || offset / element_bytes_ + want > 0xffffffffull) {
      arena_full_ = true; // the trace is full, or too large for 32-bit positions
      return 0;
    }
    layout::store_release(&arena_dir_[arena_chunks_].offset, offset);
    layout::store_release(&arena_dir_[arena_chunks_].capacity, want);
    ++arena_chunks_;
    __atomic_store_n(&arena_section_->extent_count, arena_chunks_, __ATOMIC_RELEASE);
    arena_next_ = offset / element_bytes_;
    arena_end_ = arena_next_ + want;
    arena_total_ += want;
    arena_last_ = want;
  }
  const std::uint64_t position = arena_next_;
  arena_next_ += elements;
  layout::fetch_add(used_, elements);
  return position;
}

std::uint32_t intern_table::find(std::uint64_t h, const void* data,
                                 std::uint64_t count) const noexcept {
  const std::uint64_t bytes = count * element_bytes_;
  for (std::uint32_t n = level_count_.load(std::memory_order_acquire); n-- > 0;) {
    const level& l = levels_[n];
    const std::uint64_t mask = l.capacity - 1;
    const std::uint64_t start =
        layout::hash_index(h, static_cast<unsigned>(std::countr_zero(l.capacity)));
    for (std::uint64_t i = 0; i < std::min(l.capacity, k_max_probe); ++i) {
      const std::uint64_t* s = l.slots + ((start + i) & mask) * sw::count;
      const std::uint64_t key = load_acquire(s + sw::hash);
      if (key == 0) break;
      if (key != h) continue;
      const std::uint64_t ref = load_word(s + sw::ref);
      if (((ref >> 32) & 0xffffff) != count) continue;
      const std::byte* stored = space_->base() + (ref & 0xffffffffu) * element_bytes_;
      if (std::memcmp(stored, data, bytes) == 0)
        return static_cast<std::uint32_t>(l.first_id + ((start + i) & mask));
    }
  }
  return 0;
}

std::uint32_t intern_table::intern(const void* data, std::uint64_t count) noexcept {
  if (count == 0 || count >= (1u << 24) || space_ == nullptr) {
    layout::fetch_add(overflow_, 1);
    return 0;
  }
  return intern(data, count, hash_bytes(data, count * element_bytes_));
}

std::uint32_t intern_table::intern(const void* data, std::uint64_t count,
                                   std::uint64_t h) noexcept {
  if (count == 0 || count >= (1u << 24) || space_ == nullptr) {
    layout::fetch_add(overflow_, 1);
    return 0;
  }
  if (const std::uint32_t id = find(h, data, count)) return id;
  std::lock_guard lock(mu_);
  if (const std::uint32_t id = find(h, data, count)) return id; // stored meanwhile
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::uint32_t n = level_count_.load(std::memory_order_relaxed);
    level& l = levels_[n - 1];
    const std::uint64_t mask = l.capacity - 1;
    const std::uint64_t start =
        layout::hash_index(h, static_cast<unsigned>(std::countr_zero(l.capacity)));
    for (std::uint64_t i = 0; i < std::min(l.capacity, k_max_probe); ++i) {
      std::uint64_t* s = l.slots + ((start + i) & mask) * sw::count;
      if (load_word(s + sw::hash) != 0) continue;
      const std::uint64_t position = arena_claim(count);
      if (position == 0) break;
      std::memcpy(space_->base() + position * element_bytes_, data, count * element_bytes_);
      layout::store_release(s + sw::ref, sw::pack(position, count, sw::k_ready));
      layout::store_release(s + sw::hash, h); // last: the slot is complete
      layout::fetch_add(count_, 1);
      if (++l.stored > l.capacity / 2) add_level();
      return static_cast<std::uint32_t>(l.first_id + ((start + i) & mask));
    }
    if (!add_level()) break; // this level is crowded around h: the next one is empty there
  }
  layout::fetch_add(overflow_, 1);
  return 0;
}

bool intern_table::is_valid() const {
  std::uint64_t ready = 0;
  for (std::uint32_t n = 0; n < level_count_.load(); ++n) {
    const level& l = levels_[n];
    for (std::uint64_t i = 0; i < l.capacity; ++i) {
      const std::uint64_t* s = l.slots + i * sw::count;
      const std::uint64_t key = load_word(s + sw::hash), ref = load_word(s + sw::ref);
      if (key == 0) {
        if (ref != 0) return false;
        continue;
      }
      if (ref >> 56 != sw::k_ready) return false;
      const std::uint64_t position = ref & 0xffffffffu, len = (ref >> 32) & 0xffffff;
      bool inside = false;
      for (std::uint32_t c = 0; c < arena_chunks_; ++c) {
        const std::uint64_t first = arena_dir_[c].offset / element_bytes_;
        inside = inside || (position >= first && position + len <= first + arena_dir_[c].capacity);
      }
      if (!inside) return false;
      if (hash_bytes(space_->base() + position * element_bytes_, len * element_bytes_) != key)
        return false;
      ++ready;
    }
  }
  return ready == load_word(count_);
}

std::uint64_t
read_intern_table(const std::byte* base, std::uint64_t size, const layout::section& slots,
                  const layout::extent* slots_dir, const layout::section& arena,
                  const layout::extent* arena_dir, std::uint32_t element_bytes,
                  const std::function<void(std::uint32_t, std::span<const std::byte>)>& emit) {
  std::uint64_t corrupt = 0;
  // The arena's chunks that lie inside the image.
  struct chunk {
    std::uint64_t first, last; // positions [first, last)
  };
  chunk chunks[layout::k_max_extents];
  std::uint32_t chunk_count = 0;
  std::uint64_t arena_elements = 0;
  for (std::uint32_t c = 0; c < std::min(arena.extent_count, layout::k_max_extents); ++c) {
    const std::uint64_t offset = load_acquire(&arena_dir[c].offset);
    const std::uint64_t capacity = load_acquire(&arena_dir[c].capacity);
    if (offset < layout::k_header_bytes || offset % 64 != 0 || offset > size ||
        capacity > (size - offset) / element_bytes ||
        offset / element_bytes + capacity > 0xffffffffull) {
      ++corrupt;
      continue;
    }
    chunks[chunk_count++] = {offset / element_bytes, offset / element_bytes + capacity};
    arena_elements += capacity;
  }
  std::uint64_t emitted = 0, first_id = 1, slots_seen = 0;
  for (std::uint32_t n = 0; n < std::min(slots.extent_count, layout::k_max_extents); ++n) {
    const std::uint64_t offset = load_acquire(&slots_dir[n].offset);
    const std::uint64_t capacity = load_acquire(&slots_dir[n].capacity);
    if (offset < layout::k_header_bytes || offset % 64 != 0 || offset > size || capacity == 0 ||
        capacity > (size - offset) / k_slot_bytes || capacity > size / k_slot_bytes - slots_seen ||
        first_id + capacity > 0xffffffffull) {
      ++corrupt;
      break; // later levels' ids depend on this one's capacity
    }
    slots_seen += capacity;
    const auto* words = reinterpret_cast<const std::uint64_t*>(base + offset);
    for (std::uint64_t i = 0; i < capacity; ++i) {
      if (load_acquire(words + i * sw::count + sw::hash) == 0) continue;
      const std::uint64_t ref = load_acquire(words + i * sw::count + sw::ref);
      if (ref >> 56 != sw::k_ready) continue;
      const std::uint64_t position = ref & 0xffffffffu, len = (ref >> 32) & 0xffffff;
      bool inside = false;
      for (std::uint32_t c = 0; c < chunk_count && !inside; ++c)
        inside = position >= chunks[c].first && len <= chunks[c].last - position &&
                 position <= chunks[c].last;
      // Writers claim disjoint ranges, so all sequences together fit in the arena. Refusing
      // more keeps a hostile trace (every slot naming one huge range) from costing the reader
      // slots x arena bytes.
      if (!inside || len > arena_elements - emitted) {
        ++corrupt;
        continue;
      }
      emitted += len;
      emit(static_cast<std::uint32_t>(first_id + i),
           std::span<const std::byte>(base + position * element_bytes, len * element_bytes));
    }
    first_id += capacity;
  }
  return corrupt;
}

} // namespace gmem::trace
