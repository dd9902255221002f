#include "pool/start_bitmap.h"

#include <bit>

namespace gmem {

void start_bitmap::reset(std::size_t granules) {
  std::size_t bits = granules == 0 ? 1 : granules, total = 0;
  levels_ = 0;
  for (;;) {
    std::size_t words = (bits + 63) / 64;
    offset_[levels_] = total;
    size_[levels_] = words;
    ++levels_;
    total += words;
    if (words == 1) break;
    bits = words;
  }
  words_.assign(total, 0); // keeps the capacity of a recycled segment's bitmap
}

void start_bitmap::grow(std::size_t granules) {
  const std::size_t room = levels_ == 0 ? 0 : size_[0] * 64;
  if (granules <= room) return;
  std::vector<std::uint64_t> old(words_.begin(),
                                 words_.begin() + static_cast<std::ptrdiff_t>(room / 64));
  reset(granules > 2 * room ? granules : 2 * room);
  for (std::size_t w = 0; w < old.size(); ++w)
    for (std::uint64_t bits = old[w]; bits != 0; bits &= bits - 1)
      set(w * 64 + static_cast<std::size_t>(std::countr_zero(bits)));
}

void start_bitmap::set_levels(std::size_t i) {
  for (std::size_t l = 0; l < levels_; ++l) {
    std::uint64_t& w = level(l)[i >> 6];
    bool was_zero = w == 0;
    w |= std::uint64_t{1} << (i & 63);
    if (!was_zero) return;
    i >>= 6;
  }
}

void start_bitmap::clear_levels(std::size_t i) {
  for (std::size_t l = 1; l < levels_; ++l) { // level 0's word is 0 already
    i >>= 6;
    std::uint64_t& w = level(l)[i >> 6];
    w &= ~(std::uint64_t{1} << (i & 63));
    if (w != 0) return;
  }
}

std::size_t start_bitmap::find_prev_at(std::size_t l, std::size_t i) const {
  const std::uint64_t* words = level(l);
  std::size_t w = i >> 6;
  std::uint64_t bits = words[w];
  unsigned b = static_cast<unsigned>(i & 63);
  if (b != 63) bits &= (std::uint64_t{1} << (b + 1)) - 1;
  if (bits != 0) return (w << 6) + 63 - static_cast<std::size_t>(std::countl_zero(bits));
  if (w == 0 || l + 1 == levels_) return npos;
  std::size_t j = find_prev_at(l + 1, w - 1); // the previous non-zero word
  if (j == npos) return npos;
  return (j << 6) + 63 - static_cast<std::size_t>(std::countl_zero(words[j]));
}

std::size_t start_bitmap::count() const {
  std::size_t n = 0;
  for (std::size_t w = 0; w < size_[0]; ++w)
    n += static_cast<std::size_t>(std::popcount(words_[w]));
  return n;
}

bool start_bitmap::is_valid() const {
  for (std::size_t l = 0; l + 1 < levels_; ++l) {
    const std::uint64_t* below = level(l);
    const std::uint64_t* above = level(l + 1);
    for (std::size_t w = 0; w < size_[l]; w += 64) {
      std::uint64_t want = 0;
      for (std::size_t k = w; k < size_[l] && k < w + 64; ++k)
        want |= std::uint64_t{below[k] != 0} << (k - w);
      if (above[w >> 6] != want) return false;
    }
  }
  return levels_ >= 1 && size_[levels_ - 1] == 1;
}

} // namespace gmem
