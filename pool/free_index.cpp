#include "pool/free_index.h"

#include <bit>

namespace gmem {

block* free_index::largest() const {
  if (group_mask_ == 0) return nullptr;
  unsigned g = 63u - static_cast<unsigned>(std::countl_zero(group_mask_));
  unsigned bin = g * 32 + 31u - static_cast<unsigned>(std::countl_zero(bin_mask_[g]));
  block* best = heads_[bin];
  for (block* x = best; x != nullptr; x = x->list_next)
    if (x->size > best->size) best = x;
  return best;
}

// Walks the bins the bitmaps name; a listed block in a bin whose bit is clear would be missed
// and show up as a count_/bytes_ mismatch.
bool free_index::is_valid() const {
  std::size_t bytes = 0, count = 0;
  for (unsigned g = 0; g < k_groups; ++g) {
    if ((bin_mask_[g] != 0) != (((group_mask_ >> g) & 1) != 0)) return false;
    for (std::uint32_t bins = bin_mask_[g]; bins != 0; bins &= bins - 1) {
      unsigned bin = g * 32 + static_cast<unsigned>(std::countr_zero(bins));
      if (heads_[bin] == nullptr) return false;
      block* prev = nullptr;
      for (block* x = heads_[bin]; x != nullptr; prev = x, x = x->list_next) {
        if (x->list_prev != prev || x->bin != bin || bin_of(x->size) != bin) return false;
        bytes += x->size;
        ++count;
      }
    }
  }
  return bytes == bytes_ && count == count_;
}

} // namespace gmem
