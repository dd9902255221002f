// A ring of fixed-size records with sequence numbers: the event ring and the counter sample
// ring. Writers never wait: each claims the next seq with one fetch_add and its slot with one
// CAS, so a slow or dead reader costs the writer nothing and a reader that falls a lap behind
// knows exactly which seqs it lost.
//
// Record word 0 is the state: 2*seq when the record for `seq` is complete, 2*seq-1 while it is
// being written, 0 never written. Invariant: only the writer that moved the state to
// 2*seq-1 (CAS from an even, older state) writes the other words, so two writers never mix
// their words in one record. A writer that finds its slot still being written by a writer one
// lap older drops its record (counted in `dropped`); readers see that seq as lost.
#pragma once

#include <cstdint>

#include "profiler/trace_layout.h"

namespace gmem::trace {

class seq_ring {
public:
  seq_ring() = default;
  // `records` holds capacity * record_words words; capacity is a power of two.
  seq_ring(std::uint64_t* records, std::uint64_t capacity, std::uint32_t record_words,
           std::uint64_t* head, std::uint64_t* dropped) noexcept
      : records_(records), mask_(capacity - 1), record_words_(record_words), head_(head),
        dropped_(dropped) {}

  bool is_open() const noexcept { return records_ != nullptr; }

  // Writes words[1 .. record_words) as the next record. Returns its seq, or 0 if dropped.
  std::uint64_t append(const std::uint64_t* words) noexcept {
    const std::uint64_t seq = layout::fetch_add(head_, 1) + 1;
    std::uint64_t* rec = records_ + ((seq - 1) & mask_) * record_words_;
    std::uint64_t state = layout::load_word(rec);
    for (;;) {
      if ((state & 1) != 0 || state >= 2 * seq - 1) {
        layout::fetch_add(dropped_, 1);
        return 0;
      }
      if (layout::compare_exchange(rec, state, 2 * seq - 1)) break;
    }
    for (std::uint32_t i = 1; i < record_words_; ++i)
      layout::store_release(rec + i, words[i]);
    layout::store_release(rec, 2 * seq);
    return seq;
  }

private:
  std::uint64_t* records_ = nullptr;
  std::uint64_t mask_ = 0;
  std::uint32_t record_words_ = 0;
  std::uint64_t* head_ = nullptr;
  std::uint64_t* dropped_ = nullptr;
};

// Reader side. Copies the record for `seq` into out[0 .. record_words) (out[0] = 2*seq).
// Returns false if the slot holds another seq, is being written (after bounded retries) or was
// overwritten while being copied.
inline bool read_ring_record(const std::uint64_t* records, std::uint64_t capacity,
                             std::uint32_t record_words, std::uint64_t seq,
                             std::uint64_t* out) noexcept {
  const std::uint64_t* rec = records + ((seq - 1) & (capacity - 1)) * record_words;
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::uint64_t s1 = layout::load_acquire(rec);
    if (s1 == 2 * seq - 1) continue; // being written right now: retry a little
    if (s1 != 2 * seq) return false;
    for (std::uint32_t i = 1; i < record_words; ++i)
      out[i] = layout::load_acquire(rec + i);
    if (layout::load_word(rec) != s1) return false;
    out[0] = s1;
    return true;
  }
  return false;
}

} // namespace gmem::trace
