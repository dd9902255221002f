// Live blocks by start address: open addressing with linear probing and backward-shift
// deletion, so deallocate() finds its block in O(1) with no allocation on the hot path.
// Invariant (is_valid): size_ keys are stored; every key sits between its home slot and the
// first empty slot after it; load stays at most 1/2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gmem {

struct block;

class address_map {
public:
  address_map() { rehash(1024); }
  block* find(std::uintptr_t key) const {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      const slot& s = slots_[i];
      if (s.key == key) return s.value;
      if (s.key == 0) return nullptr;
    }
  }
  void insert(std::uintptr_t key, block* value); // key != 0, not present
  block* erase(std::uintptr_t key);              // the value, or nullptr if absent
  void clear() {
    slots_.clear();
    rehash(1024);
  }
  std::size_t size() const { return size_; }
  template <class F> void for_each(F&& f) const {
    for (const slot& s : slots_)
      if (s.key != 0) f(s.key, s.value);
  }
  bool is_valid() const;

private:
  struct slot {
    std::uintptr_t key = 0; // 0 = empty (the upstream never returns address 0)
    block* value = nullptr;
  };
  std::size_t home(std::uintptr_t key) const {
    return static_cast<std::size_t>(((key >> 9) * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void rehash(std::size_t capacity);

  std::vector<slot> slots_;
  std::size_t mask_ = 0;
  unsigned shift_ = 0;
  std::size_t size_ = 0;
};

// Hot paths, inline.

inline void address_map::insert(std::uintptr_t key, block* value) {
  if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
  std::size_t i = home(key);
  while (slots_[i].key != 0)
    i = (i + 1) & mask_;
  slots_[i] = slot{key, value};
  ++size_;
}

inline block* address_map::erase(std::uintptr_t key) {
  std::size_t i = home(key);
  for (;; i = (i + 1) & mask_) {
    if (slots_[i].key == 0) return nullptr; // first: key 0 marks an empty slot, never a key
    if (slots_[i].key == key) break;
  }
  block* value = slots_[i].value;
  // Backward shift: move later entries of the probe run into the hole when their home slot
  // does not lie cyclically in (hole, j].
  std::size_t hole = i;
  for (std::size_t j = (i + 1) & mask_; slots_[j].key != 0; j = (j + 1) & mask_) {
    std::size_t h = home(slots_[j].key);
    bool stays = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (stays) continue;
    slots_[hole] = slots_[j];
    hole = j;
  }
  slots_[hole] = slot{};
  --size_;
  return value;
}

} // namespace gmem
