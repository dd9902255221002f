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

} // namespace gmem
