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
  void set(std::size_t i);
  void clear(std::size_t i);
  bool test(std::size_t i) const { return (levels_[0][i >> 6] >> (i & 63)) & 1; }
  // The largest set index <= i, or npos.
  std::size_t find_prev(std::size_t i) const { return find_prev_at(0, i); }
  std::size_t count() const; // set bits (for is_valid)
  // Invariant, checked here: every summary bit is set exactly when its word below is non-zero.
  bool is_valid() const;

private:
  std::size_t find_prev_at(std::size_t level, std::size_t i) const;
  std::vector<std::vector<std::uint64_t>> levels_; // levels_[0]: granules; last: one word
};

} // namespace gmem
