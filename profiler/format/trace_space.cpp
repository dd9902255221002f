#include "profiler/format/trace_space.h"

#include <algorithm>

#include "profiler/format/trace_layout.h"

namespace gmem::trace {

namespace {
std::uint64_t align64(std::uint64_t v) {
  return (v + 63) & ~std::uint64_t{63};
}
} // namespace

trace_space::trace_space(std::byte* base, std::uint64_t map_bytes, std::uint64_t initial_bytes,
                         std::uint64_t* total_bytes, std::uint64_t* refused, std::uint64_t* flags,
                         trace_backing* backing) noexcept
    : base_(base), map_bytes_(map_bytes), total_bytes_(total_bytes), refused_(refused),
      flags_(flags), backing_(backing), end_(align64(initial_bytes)) {
  layout::store_release(total_bytes_, end_);
}

std::uint64_t trace_space::allocate(std::uint64_t bytes, bool* late) noexcept {
  bytes = align64(bytes);
  if (late != nullptr) *late = false;
  std::lock_guard lock(mu_);
  // Best fit among the spares; the rest of the spare stays spare.
  std::size_t best = spares_.size();
  for (std::size_t i = 0; i < spares_.size(); ++i)
    if (spares_[i].bytes >= bytes &&
        (best == spares_.size() || spares_[i].bytes < spares_[best].bytes))
      best = i;
  if (best != spares_.size()) {
    const std::uint64_t offset = spares_[best].offset;
    spares_[best].offset += bytes;
    spares_[best].bytes -= bytes;
    if (spares_[best].bytes == 0)
      spares_.erase(spares_.begin() + static_cast<std::ptrdiff_t>(best));
    // A reader may still be copying the old table (it retries: the directory changed), so
    // the words are cleared as shared words.
    std::uint64_t* w = words(offset);
    for (std::uint64_t k = 0; k < bytes / 8; ++k)
      layout::store_word(w + k, 0);
    return offset;
  }
  const std::uint64_t offset = end_;
  const std::uint64_t backed = layout::load_word(total_bytes_);
  const bool fits = bytes != 0 && bytes <= map_bytes_ && offset <= map_bytes_ - bytes;
  const bool grows = fits && backing_ != nullptr && offset + bytes > backed;
  if (grows && late != nullptr) *late = !backing_->backed(offset + bytes);
  if (!fits || (grows && !backing_->grow(offset + bytes))) {
    layout::fetch_add(refused_, 1);
    __atomic_fetch_or(flags_, layout::k_flag_full, __ATOMIC_RELEASE);
    return 0;
  }
  end_ = offset + bytes;
  // Bytes below the old end were given back earlier and may hold old records: cleared.
  std::uint64_t* w = words(offset);
  for (std::uint64_t k = 0; offset + 8 * k < std::min(end_, backed); ++k)
    layout::store_word(w + k, 0);
  if (end_ > backed) layout::store_release(total_bytes_, end_);
  return offset;
}

void trace_space::prepare(std::uint64_t bytes) noexcept {
  if (backing_ == nullptr) return;
  std::uint64_t want;
  {
    std::lock_guard lock(mu_);
    // A spare that fits makes the allocation cheap already.
    for (const spare& s : spares_)
      if (s.bytes >= align64(bytes)) return;
    want = end_ + align64(bytes);
    if (want > map_bytes_) return;
  }
  backing_->prepare(want);
}

void trace_space::trim() noexcept {
  if (backing_ == nullptr) return;
  std::lock_guard lock(mu_);
  backing_->trim(layout::load_word(total_bytes_));
}

void trace_space::retire(std::uint64_t offset, std::uint64_t bytes) noexcept {
  bytes = align64(bytes);
  std::lock_guard lock(mu_);
  try {
    // Sorted by offset; neighbours merge, and a spare that reaches the end moves the end back
    // (the file keeps its size: the next extents reuse those bytes first).
    auto it = std::lower_bound(spares_.begin(), spares_.end(), offset,
                               [](const spare& s, std::uint64_t o) { return s.offset < o; });
    it = spares_.insert(it, {offset, bytes});
    if (auto next = it + 1; next != spares_.end() && it->offset + it->bytes == next->offset) {
      it->bytes += next->bytes;
      spares_.erase(next);
    }
    if (it != spares_.begin()) {
      auto prev = it - 1;
      if (prev->offset + prev->bytes == it->offset) {
        prev->bytes += it->bytes;
        it = spares_.erase(it) - 1;
      }
    }
    if (it->offset + it->bytes == end_) {
      end_ = it->offset;
      spares_.erase(it);
    }
  } catch (...) { // no memory for the note: the extent is simply not reused
  }
}

std::uint64_t trace_space::used_bytes() const noexcept {
  std::lock_guard lock(mu_);
  return end_;
}

} // namespace gmem::trace
