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
