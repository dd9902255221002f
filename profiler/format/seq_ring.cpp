#include "profiler/format/seq_ring.h"

#include <algorithm>
#include <bit>
#include <mutex>

namespace gmem::trace {

bool seq_ring::open(trace_space* space, layout::header* h, layout::section_id id,
                    std::uint64_t capacity, std::uint64_t first_chunk, std::uint32_t record_words,
                    std::uint64_t* head, std::uint64_t* dropped) noexcept {
  const std::uint64_t c0 = std::min(first_chunk, capacity);
  h->sections[id].capacity = capacity;
  h->sections[id].record_bytes = record_words * 8;
  h->sections[id].extent_count = layout::ring_chunk_count(capacity, c0);
  return open(space, h->extents[id], capacity, c0, record_words, head, dropped, false, nullptr,
              nullptr);
}

bool seq_ring::open(trace_space* space, layout::extent* dir, std::uint64_t capacity,
                    std::uint64_t first_chunk, std::uint32_t record_words, std::uint64_t* head,
                    std::uint64_t* dropped, bool owned, std::uint64_t* size_word,
                    std::atomic<std::int64_t>* budget) noexcept {
  space_ = space;
  dir_ = dir;
  first_chunk_ = std::min(first_chunk, capacity);
  record_words_ = record_words;
  head_ = head;
  dropped_ = dropped;
  budget_ = budget;
  const std::uint32_t chunks = layout::ring_chunk_count(capacity, first_chunk_);
  for (std::uint32_t k = 0; k < chunks; ++k)
    dir_[k] = {0, layout::ring_chunk_records(k, first_chunk_)};
  if (!owned) {
    mask_ = capacity - 1;
    if (add_chunk(0) == nullptr) return false;
    if (size_word != nullptr) layout::store_release(size_word, capacity);
    return true;
  }
  capacity_ = capacity;
  size_word_ = size_word;
  last_ = layout::load_word(head);
  mask_ = first_chunk_ - 1;
  next_at_ = first_chunk_ < capacity ? first_chunk_ : ~std::uint64_t{0};
  grow_at_ = next_at_ == ~std::uint64_t{0} ? next_at_ : next_at_ - (next_at_ >> lead_shift_);
  if (add_chunk(0) == nullptr) return false;
  layout::store_release(size_word_, first_chunk_);
  return true;
}

void seq_ring::announce() noexcept {
  const std::uint64_t records = next_at_; // chunk k >= 1 holds as many records as before it
  if (budget_ == nullptr ||
      budget_->load(std::memory_order_relaxed) >= static_cast<std::int64_t>(records))
    space_->prepare(records * record_words_ * 8);
}

void seq_ring::grow() noexcept {
  if (grow_at_ < next_at_) {
    announce();
    grow_at_ = next_at_;
    return;
  }
  const std::uint64_t opened = next_at_; // the new chunk's first index, written now
  bool late = false;
  if (add_chunk(layout::ring_chunk_of(opened, first_chunk_), &late) == nullptr) {
    grow_at_ = next_at_ = ~std::uint64_t{0}; // wrap here from now on: the ring keeps its size
    return;
  }
  // The trace made this chunk on this thread: it was announced too late for the helper.
  // Announcing the next one twice as early (at the chunk's start at most) costs the file that
  // chunk's bytes sooner; a ring written no faster than the helper works keeps the quarter.
  if (late && lead_shift_ > 0) --lead_shift_;
  const std::uint64_t size = opened * 2;
  layout::store_release(size_word_, size); // before any record of the new chunk
  mask_ = size - 1;
  next_at_ = size < capacity_ ? size : ~std::uint64_t{0};
  if (next_at_ == ~std::uint64_t{0}) {
    grow_at_ = next_at_;
    return;
  }
  grow_at_ = next_at_ - ((next_at_ - opened) >> lead_shift_);
  if (grow_at_ == opened) { // a lead of the whole chunk: now
    announce();
    grow_at_ = next_at_;
  }
}

std::uint64_t* seq_ring::add_chunk(std::uint32_t k, bool* late) noexcept {
  std::lock_guard lock(mu_);
  if (std::uint64_t* chunk = chunks_[k].load(std::memory_order_acquire)) return chunk;
  if (refused_) return nullptr;
  const std::uint64_t records = layout::ring_chunk_records(k, first_chunk_);
  if (budget_ != nullptr &&
      budget_->fetch_sub(static_cast<std::int64_t>(records), std::memory_order_relaxed) <
          static_cast<std::int64_t>(records)) {
    budget_->fetch_add(static_cast<std::int64_t>(records), std::memory_order_relaxed);
    refused_ = true; // over the budget: as if the trace had no room
    return nullptr;
  }
  const std::uint64_t offset = space_->allocate(records * record_words_ * 8, late);
  if (offset == 0) {
    refused_ = true; // asked once; the records of this chunk are dropped from now on
    return nullptr;
  }
  layout::store_release(&dir_[k].offset, offset);
  chunks_[k].store(space_->words(offset), std::memory_order_release);
  return space_->words(offset);
}

bool ring_view::open(const std::byte* base, std::uint64_t size, const layout::section& section,
                     const layout::extent* dir, std::uint32_t record_words, std::uint64_t* corrupt,
                     const char** problem) {
  base_ = base;
  capacity_ = section.capacity;
  record_words_ = record_words;
  first_chunk_ = layout::load_acquire(&dir[0].capacity);
  if (capacity_ == 0 || (capacity_ & (capacity_ - 1)) != 0 ||
      capacity_ > (std::uint64_t{1} << 40)) {
    *problem = "ring capacity is not a power of two";
    return false;
  }
  if (first_chunk_ == 0 || (first_chunk_ & (first_chunk_ - 1)) != 0 || first_chunk_ > capacity_) {
    *problem = "first ring chunk is not a power of two no larger than the ring";
    return false;
  }
  chunk_count_ = layout::ring_chunk_count(capacity_, first_chunk_);
  if (chunk_count_ > layout::k_max_extents || section.extent_count != chunk_count_) {
    *problem = "ring chunk count does not match its capacity";
    return false;
  }
  bytes_ = 0;
  for (std::uint32_t k = 0; k < chunk_count_; ++k) {
    const std::uint64_t offset = layout::load_acquire(&dir[k].offset);
    const std::uint64_t records = layout::load_acquire(&dir[k].capacity);
    if (records != layout::ring_chunk_records(k, first_chunk_)) {
      *problem = "ring chunk size does not match its place";
      return false;
    }
    if (offset == 0) continue; // not reached (yet)
    const std::uint64_t bytes = records * record_words * 8;
    if (offset < layout::k_header_bytes || offset % 64 != 0 || offset > size ||
        records > (size - offset) / (record_words * 8) || bytes > size - bytes_) {
      ++*corrupt;
      continue;
    }
    bytes_ += bytes;
    chunks_[k] = reinterpret_cast<const std::uint64_t*>(base + offset);
  }
  return true;
}

std::vector<std::uint64_t> ring_view::seqs_present(std::uint64_t first, std::uint64_t last) const {
  std::vector<std::uint64_t> seqs;
  if (first == 0 || first > last) return seqs;
  const std::uint64_t mask = capacity_ - 1;
  const std::uint64_t span = last - first; // < capacity for the callers; clamped anyway
  for (std::uint32_t k = 0; k < chunk_count_; ++k) {
    if (chunks_[k] == nullptr) continue;
    const std::uint64_t start = layout::ring_chunk_start(k, first_chunk_);
    const std::uint64_t records = layout::ring_chunk_records(k, first_chunk_);
    for (std::uint64_t index = start; index < start + records; ++index) {
      // The newest seq <= last that maps to this slot.
      const std::uint64_t back = (last - 1 - index) & mask;
      if (back <= span) seqs.push_back(last - back);
    }
  }
  std::sort(seqs.begin(), seqs.end());
  return seqs;
}

std::uint64_t ring_view::offset_of(std::uint64_t seq) const noexcept {
  const std::uint64_t index = (seq - 1) & (capacity_ - 1);
  const std::uint32_t k = layout::ring_chunk_of(index, first_chunk_);
  if (chunks_[k] == nullptr) return 0;
  const auto* rec =
      chunks_[k] + (index - layout::ring_chunk_start(k, first_chunk_)) * record_words_;
  return static_cast<std::uint64_t>(reinterpret_cast<const std::byte*>(rec) - base_);
}

bool ring_view::read(std::uint64_t seq, std::uint64_t* out) const noexcept {
  const std::uint64_t index = (seq - 1) & (capacity_ - 1);
  const std::uint32_t k = layout::ring_chunk_of(index, first_chunk_);
  if (chunks_[k] == nullptr) return false;
  const std::uint64_t* rec =
      chunks_[k] + (index - layout::ring_chunk_start(k, first_chunk_)) * record_words_;
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::uint64_t s1 = layout::load_acquire(rec);
    if (s1 == 2 * seq - 1) continue; // being written right now: retry a little
    if (s1 != 2 * seq) return false;
    for (std::uint32_t i = 1; i < record_words_; ++i)
      out[i] = layout::load_acquire(rec + i);
    if (layout::load_word(rec) != s1) return false;
    out[0] = s1;
    return true;
  }
  return false;
}

} // namespace gmem::trace
