#include "pool/free_index.h"

#include <bit>

namespace gmem {

unsigned free_index::bin_of(std::size_t size) {
  std::size_t g = size >> 9;
  if (g < 32) return static_cast<unsigned>(g);
  unsigned fl = 63u - static_cast<unsigned>(std::countl_zero(g)); // >= 5
  unsigned sl = static_cast<unsigned>(g >> (fl - 5)) & 31u;
  return (fl - 4) * 32 + sl;
}

void free_index::insert(block* b) {
  unsigned bin = bin_of(b->size);
  b->bin = static_cast<std::uint16_t>(bin);
  b->list_prev = nullptr;
  b->list_next = heads_[bin];
  if (heads_[bin] != nullptr) heads_[bin]->list_prev = b;
  heads_[bin] = b;
  bin_mask_[bin >> 5] |= 1u << (bin & 31);
  group_mask_ |= std::uint64_t{1} << (bin >> 5);
  bytes_ += b->size;
  ++count_;
}

void free_index::remove(block* b) {
  unsigned bin = b->bin;
  if (b->list_prev != nullptr)
    b->list_prev->list_next = b->list_next;
  else
    heads_[bin] = b->list_next;
  if (b->list_next != nullptr) b->list_next->list_prev = b->list_prev;
  b->list_prev = b->list_next = nullptr;
  if (heads_[bin] == nullptr) {
    bin_mask_[bin >> 5] &= ~(1u << (bin & 31));
    if (bin_mask_[bin >> 5] == 0) group_mask_ &= ~(std::uint64_t{1} << (bin >> 5));
  }
  bytes_ -= b->size;
  --count_;
}

block* free_index::best_of(block* head, std::size_t size) {
  block* best = nullptr;
  int seen = 0;
  for (block* x = head; x != nullptr && seen < k_scan; x = x->list_next, ++seen) {
    if (x->size < size) continue;
    if (x->size == size) return x;
    if (best == nullptr || x->size < best->size) best = x;
  }
  return best;
}

unsigned free_index::next_nonempty_after(unsigned bin) const {
  unsigned g = bin >> 5, b = bin & 31;
  std::uint32_t bins = b == 31 ? 0 : bin_mask_[g] & (~0u << (b + 1));
  if (bins != 0) return g * 32 + static_cast<unsigned>(std::countr_zero(bins));
  std::uint64_t groups = g == 63 ? 0 : group_mask_ & (~std::uint64_t{0} << (g + 1));
  if (groups == 0) return k_bins;
  unsigned g2 = static_cast<unsigned>(std::countr_zero(groups));
  return g2 * 32 + static_cast<unsigned>(std::countr_zero(bin_mask_[g2]));
}

block* free_index::find_fit(std::size_t size) const {
  if (count_ == 0) return nullptr;
  unsigned bin = bin_of(size);
  if (heads_[bin] != nullptr) {
    if (block* b = best_of(heads_[bin], size)) return b;
  }
  unsigned next = next_nonempty_after(bin);
  if (next != k_bins) return best_of(heads_[next], size);
  // Nothing larger anywhere: a fitting block may sit deeper in the own bin than k_scan.
  block* best = nullptr;
  for (block* x = heads_[bin]; x != nullptr; x = x->list_next)
    if (x->size >= size && (best == nullptr || x->size < best->size)) best = x;
  return best;
}

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
