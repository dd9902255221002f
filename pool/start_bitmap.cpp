#include "pool/start_bitmap.h"

#include <bit>

namespace gmem {

void start_bitmap::reset(std::size_t granules) {
  levels_.clear();
  std::size_t bits = granules == 0 ? 1 : granules;
  for (;;) {
    std::size_t words = (bits + 63) / 64;
    levels_.emplace_back(words, 0);
    if (words == 1) break;
    bits = words;
  }
}

void start_bitmap::set(std::size_t i) {
  for (auto& level : levels_) {
    std::uint64_t& w = level[i >> 6];
    bool was_zero = w == 0;
    w |= std::uint64_t{1} << (i & 63);
    if (!was_zero) return;
    i >>= 6;
  }
}

void start_bitmap::clear(std::size_t i) {
  for (auto& level : levels_) {
    std::uint64_t& w = level[i >> 6];
    w &= ~(std::uint64_t{1} << (i & 63));
    if (w != 0) return;
    i >>= 6;
  }
}

std::size_t start_bitmap::find_prev_at(std::size_t level, std::size_t i) const {
  const auto& words = levels_[level];
  std::size_t w = i >> 6;
  std::uint64_t bits = words[w];
  unsigned b = static_cast<unsigned>(i & 63);
  if (b != 63) bits &= (std::uint64_t{1} << (b + 1)) - 1;
  if (bits != 0) return (w << 6) + 63 - static_cast<std::size_t>(std::countl_zero(bits));
  if (w == 0 || level + 1 == levels_.size()) return npos;
  std::size_t j = find_prev_at(level + 1, w - 1); // the previous non-zero word
  if (j == npos) return npos;
  return (j << 6) + 63 - static_cast<std::size_t>(std::countl_zero(words[j]));
}

std::size_t start_bitmap::count() const {
  std::size_t n = 0;
  for (std::uint64_t w : levels_[0])
    n += static_cast<std::size_t>(std::popcount(w));
  return n;
}

bool start_bitmap::is_valid() const {
  for (std::size_t l = 0; l + 1 < levels_.size(); ++l) {
    const auto& below = levels_[l];
    const auto& above = levels_[l + 1];
    for (std::size_t w = 0; w < below.size(); w += 64) {
      std::uint64_t want = 0;
      for (std::size_t k = w; k < below.size() && k < w + 64; ++k)
        want |= std::uint64_t{below[k] != 0} << (k - w);
      if (above[w >> 6] != want) return false;
    }
  }
  return levels_.back().size() == 1;
}

} // namespace gmem
