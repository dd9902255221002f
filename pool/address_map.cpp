#include "pool/address_map.h"

#include <bit>

namespace gmem {

void address_map::rehash(std::size_t capacity) {
  std::vector<slot> old;
  old.swap(slots_);
  slots_.assign(capacity, slot{});
  mask_ = capacity - 1;
  shift_ = 64u - static_cast<unsigned>(std::countr_zero(capacity));
  size_ = 0;
  for (const slot& s : old)
    if (s.key != 0) insert(s.key, s.value);
}

void address_map::insert(std::uintptr_t key, block* value) {
  if ((size_ + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
  std::size_t i = home(key);
  while (slots_[i].key != 0)
    i = (i + 1) & mask_;
  slots_[i] = slot{key, value};
  ++size_;
}

block* address_map::erase(std::uintptr_t key) {
  std::size_t i = home(key);
  for (;; i = (i + 1) & mask_) {
    if (slots_[i].key == key) break;
    if (slots_[i].key == 0) return nullptr;
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

bool address_map::is_valid() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].key == 0) continue;
    ++n;
    for (std::size_t j = home(slots_[i].key); j != i; j = (j + 1) & mask_)
      if (slots_[j].key == 0) return false; // unreachable from its home slot
  }
  return n == size_ && size_ * 2 <= slots_.size();
}

} // namespace gmem
