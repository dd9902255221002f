// Which 512-byte granules of a segment start a block: one bit per granule plus summary levels
// (one bit per non-zero word below), so "the block containing address x" is found in
// O(log64 n) without walking the segment. Host memory: 1/4096 of the segment size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gmem {

class start_bitmap {
public:
  static constexpr std::size_t npos = ~std::size_t{0};

  void reset(std::size_t granules);
  // Room for at least `granules`, keeping the bits set (capacity doubles: amortized O(1)).
  void grow(std::size_t granules);
  // Level 0 is at words_[0]: a word that stays non-zero (the usual split and merge inside a
  // segment) changes no summary level, so that case is inline.
  void set(std::size_t i) {
    std::uint64_t& w = words_[i >> 6];
    if (w == 0) return set_levels(i);
    w |= std::uint64_t{1} << (i & 63);
  }
  void clear(std::size_t i) {
    std::uint64_t& w = words_[i >> 6];
    w &= ~(std::uint64_t{1} << (i & 63));
    if (w == 0) clear_levels(i);
  }
  bool test(std::size_t i) const { return (words_[i >> 6] >> (i & 63)) & 1; }
  // The largest set index <= i, or npos.
  std::size_t find_prev(std::size_t i) const { return find_prev_at(0, i); }
  std::size_t count() const; // set bits (for is_valid)
  // Invariant, checked here: every summary bit is set exactly when its word below is non-zero.
  bool is_valid() const;

private:
  static constexpr std::size_t k_max_levels = 12; // 64^11 granules: far beyond any device
  std::uint64_t* level(std::size_t l) { return words_.data() + offset_[l]; }
  const std::uint64_t* level(std::size_t l) const { return words_.data() + offset_[l]; }
  std::size_t find_prev_at(std::size_t level, std::size_t i) const;
  void set_levels(std::size_t i);   // set(i) when its level-0 word is 0
  void clear_levels(std::size_t i); // clear(i) once its level-0 word became 0
  // All levels in one allocation (reused by reset): level l holds size_[l] words from
  // offset_[l]; level 0 has a bit per granule, the last level a single word.
  std::vector<std::uint64_t> words_;
  std::size_t offset_[k_max_levels] = {};
  std::size_t size_[k_max_levels] = {};
  std::size_t levels_ = 0;
};

} // namespace gmem
