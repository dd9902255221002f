// Free blocks of one safety class (safe for every stream, or stream-free on one stream) and
// one segment class (small or large), in segregated size bins with two-level bitmaps, as in
// TLSF: insert, remove and find are O(1).
//
// Bins, for sizes in 512-byte granules g: g < 32 has one bin per size (exact); above, 32 bins
// per power of two, so the blocks of one bin differ by less than 1/32 of their size.
// find_fit(size) looks in the size's own bin for the best of the first k_scan blocks that fit,
// then takes the best of the first k_scan blocks of the next non-empty bin (all of which fit):
// best fit to within 1/32, without walking long lists. Only when no larger bin has a block
// is the own bin walked to its end, so a fitting block is never missed.
// Invariant (is_valid): bin_mask_ bit b set <=> heads_[b] != nullptr; group_mask_ bit g set
// <=> bin_mask_[g] != 0; every listed block has bin == its bin and a size that maps there;
// bytes_ and count_ are the sums over all lists.
#pragma once

#include "pool/block.h"

#include <bit>
#include <cstddef>
#include <cstdint>

namespace gmem {

class free_index {
public:
  static constexpr unsigned k_groups = 64;
  static constexpr unsigned k_bins = k_groups * 32;
  static constexpr int k_scan = 8;

  static unsigned bin_of(std::size_t size);

  void insert(block* b);
  void remove(block* b);
  block* find_fit(std::size_t size) const; // nullptr: nothing fits; the block stays listed
  block* largest() const;                  // nullptr when empty
  std::size_t bytes() const { return bytes_; }
  std::size_t count() const { return count_; }
  bool empty() const { return count_ == 0; }

  template <class F> void for_each(F&& f) const {
    std::uint64_t groups = group_mask_;
    while (groups != 0) {
      unsigned g = static_cast<unsigned>(__builtin_ctzll(groups));
      groups &= groups - 1;
      std::uint32_t bins = bin_mask_[g];
      while (bins != 0) {
        unsigned b = g * 32 + static_cast<unsigned>(__builtin_ctz(bins));
        bins &= bins - 1;
        for (block* x = heads_[b]; x != nullptr;) {
          block* n = x->list_next; // f may remove x
          f(x);
          x = n;
        }
      }
    }
  }

  bool is_valid() const;

private:
  static block* best_of(block* head, std::size_t size);
  unsigned next_nonempty_after(unsigned bin) const; // k_bins when none

  block* heads_[k_bins] = {};
  std::uint32_t bin_mask_[k_groups] = {};
  std::uint64_t group_mask_ = 0;
  std::size_t bytes_ = 0;
  std::size_t count_ = 0;
};

// Hot paths, inline.

inline unsigned free_index::bin_of(std::size_t size) {
  std::size_t g = size >> 9;
  if (g < 32) return static_cast<unsigned>(g);
  unsigned fl = 63u - static_cast<unsigned>(std::countl_zero(g)); // >= 5
  unsigned sl = static_cast<unsigned>(g >> (fl - 5)) & 31u;
  return (fl - 4) * 32 + sl;
}

inline void free_index::insert(block* b) {
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

inline void free_index::remove(block* b) {
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

inline block* free_index::best_of(block* head, std::size_t size) {
  block* best = nullptr;
  int seen = 0;
  for (block* x = head; x != nullptr && seen < k_scan; x = x->list_next, ++seen) {
    if (x->size < size) continue;
    if (x->size == size) return x;
    if (best == nullptr || x->size < best->size) best = x;
  }
  return best;
}

inline unsigned free_index::next_nonempty_after(unsigned bin) const {
  unsigned g = bin >> 5, b = bin & 31;
  std::uint32_t bins = b == 31 ? 0 : bin_mask_[g] & (~0u << (b + 1));
  if (bins != 0) return g * 32 + static_cast<unsigned>(std::countr_zero(bins));
  std::uint64_t groups = g == 63 ? 0 : group_mask_ & (~std::uint64_t{0} << (g + 1));
  if (groups == 0) return k_bins;
  unsigned g2 = static_cast<unsigned>(std::countr_zero(groups));
  return g2 * 32 + static_cast<unsigned>(std::countr_zero(bin_mask_[g2]));
}

inline block* free_index::find_fit(std::size_t size) const {
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

} // namespace gmem
