#include "profiler/intern_table.h"

#include <bit>
#include <cstring>

namespace gmem::trace {

namespace sw = layout::slot_word;
using layout::load_acquire;
using layout::load_word;

std::uint64_t hash_bytes(const void* data, std::size_t bytes) noexcept {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 0xcbf29ce484222325ull;
  std::size_t i = 0;
  for (; i + 8 <= bytes; i += 8) { // word at a time: stacks are words
    std::uint64_t v;
    std::memcpy(&v, p + i, 8);
    h = (h ^ v) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i)
    h = (h ^ p[i]) * 0x100000001b3ull;
  h ^= h >> 32;
  return h == 0 ? 1 : h;
}

intern_table::intern_table(std::uint64_t* slots, std::uint64_t capacity, std::byte* arena,
                           std::uint64_t arena_bytes, std::uint32_t element_bytes,
                           std::uint64_t* count, std::uint64_t* overflow,
                           std::uint64_t* used) noexcept
    : slots_(slots), mask_(capacity - 1), bits_(static_cast<unsigned>(std::countr_zero(capacity))),
      arena_(arena), arena_elements_(arena_bytes / element_bytes), element_bytes_(element_bytes),
      count_(count), overflow_(overflow), used_(used) {}

std::uint32_t intern_table::intern(const void* data, std::uint64_t count) noexcept {
  const std::uint64_t bytes = count * element_bytes_;
  const std::uint64_t h = hash_bytes(data, bytes);
  const std::uint64_t start = layout::hash_index(h, bits_);
  const std::uint64_t probes = mask_ < k_max_probe ? mask_ + 1 : k_max_probe;
  for (std::uint64_t i = 0; count != 0 && count < (1u << 24) && i < probes; ++i) {
    const std::uint64_t index = (start + i) & mask_;
    std::uint64_t* s = slots_ + index * sw::count;
    std::uint64_t key = load_acquire(s + sw::hash);
    if (key == 0 && layout::compare_exchange(s + sw::hash, key, h)) {
      const std::uint64_t offset = layout::fetch_add(used_, count);
      if (offset > arena_elements_ || arena_elements_ - offset < count ||
          offset + count > 0xffffffffull) {
        layout::store_release(s + sw::ref, sw::pack(0, 0, sw::k_failed));
        break;
      }
      std::memcpy(arena_ + offset * element_bytes_, data, bytes);
      layout::store_release(s + sw::ref, sw::pack(offset, count, sw::k_ready));
      layout::fetch_add(count_, 1);
      return static_cast<std::uint32_t>(index + 1);
    }
    if (key != h) continue;
    std::uint64_t ref = load_acquire(s + sw::ref);
    for (int spin = 0; ref >> 56 == sw::k_writing && spin < 4096; ++spin) {
      layout::cpu_relax();
      ref = load_acquire(s + sw::ref);
    }
    if (ref >> 56 != sw::k_ready || ((ref >> 32) & 0xffffff) != count) continue;
    const std::uint64_t offset = ref & 0xffffffffu;
    if (std::memcmp(arena_ + offset * element_bytes_, data, bytes) == 0)
      return static_cast<std::uint32_t>(index + 1);
  }
  layout::fetch_add(overflow_, 1);
  return 0;
}

bool intern_table::is_valid() const {
  std::uint64_t ready = 0;
  for (std::uint64_t i = 0; i <= mask_; ++i) {
    const std::uint64_t* s = slots_ + i * sw::count;
    const std::uint64_t key = load_word(s + sw::hash), ref = load_word(s + sw::ref);
    if (key == 0) {
      if (ref != 0) return false;
      continue;
    }
    if (ref >> 56 != sw::k_ready) continue;
    const std::uint64_t offset = ref & 0xffffffffu, n = (ref >> 32) & 0xffffff;
    if (offset > arena_elements_ || arena_elements_ - offset < n) return false;
    if (hash_bytes(arena_ + offset * element_bytes_, n * element_bytes_) != key) return false;
    ++ready;
  }
  return ready == load_word(count_);
}

std::uint64_t
read_intern_table(const std::uint64_t* slots, std::uint64_t capacity, const std::byte* arena,
                  std::uint64_t arena_bytes, std::uint32_t element_bytes,
                  const std::function<void(std::uint32_t, std::span<const std::byte>)>& emit) {
  std::uint64_t corrupt = 0, emitted = 0;
  const std::uint64_t elements = arena_bytes / element_bytes;
  for (std::uint64_t i = 0; i < capacity && i < 0xffffffffu; ++i) {
    const std::uint64_t ref = load_acquire(slots + i * sw::count + sw::ref);
    if (ref >> 56 != sw::k_ready) continue;
    const std::uint64_t offset = ref & 0xffffffffu, n = (ref >> 32) & 0xffffff;
    // Writers claim disjoint ranges, so all ranges together fit in the arena. Refusing more
    // keeps a hostile trace (every slot naming the same huge range) from costing the reader
    // slots x arena bytes.
    if (offset > elements || elements - offset < n || n > elements - emitted) {
      ++corrupt;
      continue;
    }
    emitted += n;
    emit(static_cast<std::uint32_t>(i + 1),
         std::span<const std::byte>(arena + offset * element_bytes, n * element_bytes));
  }
  return corrupt;
}

} // namespace gmem::trace
