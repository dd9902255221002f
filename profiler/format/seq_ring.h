// A ring of fixed-size records with sequence numbers: the event lanes
// (profiler/recorder/event_lanes.h) and the counter sample ring. A ring has one of two modes:
//   shared: any number of writers. Each claims the next seq with one fetch_add and its slot
//           with one CAS, so a slow or dead reader costs the writer nothing and a reader that
//           falls a lap behind knows exactly which seqs it lost.
//   owned:  one writer thread at a time (an event lane). It numbers its records itself and
//           writes them with plain stores: no locked instruction.
//
// The ring's memory comes in chunks (trace_layout.h, section_kind::ring) allocated the first
// time the ring reaches them, so a short run holds a small ring. A shared ring has its full
// size after one lap; a chunk the trace has no room for stays missing: its records are dropped
// and counted, the rest of the ring keeps working. An owned ring grows only while it has not
// wrapped: when the trace (or the lanes' budget) refuses the next chunk it keeps the chunks it
// has, a power of two of records, and wraps there; its `capacity` word says how many.
//
// Record word 0 is the state: 2*seq when the record for `seq` is complete, 2*seq-1 while it is
// being written, 0 never written. Invariant: only the writer that moved the state to
// 2*seq-1 (shared: by a CAS from an even, older state) writes the other words, so two writers
// never mix their words in one record. A shared writer that finds its slot still being written
// by a writer one lap older drops its record (counted in `dropped`); readers see that seq as
// lost.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "common/spin_mutex.h"
#include "profiler/format/trace_layout.h"
#include "profiler/format/trace_space.h"

namespace gmem::trace {

class seq_ring {
public:
  seq_ring() = default;
  seq_ring(const seq_ring&) = delete;
  seq_ring& operator=(const seq_ring&) = delete;
  // Formats section `id` of the trace in `space` as a shared ring: `capacity` records (a power
  // of two) of `record_words` words, the first chunk `first_chunk` records (a power of two). The
  // head and dropped counters live in the header. Returns false when there is no room for
  // chunk 0.
  bool open(trace_space* space, layout::header* h, layout::section_id id, std::uint64_t capacity,
            std::uint64_t first_chunk, std::uint32_t record_words, std::uint64_t* head,
            std::uint64_t* dropped) noexcept;
  // The same with the chunk directory `dir` (k_max_extents entries) and the counters anywhere
  // in the trace; its size (records it holds now) published in *size_word when given. `owned`:
  // one writer at a time (append_owned), growing from `first_chunk` records up to `capacity`;
  // else its size is `capacity` from the start. `budget`, when given:
  // records the ring may still allocate, shared with other rings (taken chunk by chunk).
  bool open(trace_space* space, layout::extent* dir, std::uint64_t capacity,
            std::uint64_t first_chunk, std::uint32_t record_words, std::uint64_t* head,
            std::uint64_t* dropped, bool owned, std::uint64_t* size_word,
            std::atomic<std::int64_t>* budget) noexcept;

  bool is_open() const noexcept { return space_ != nullptr; }

  // Shared mode: writes words[1 .. record_words) as the next record. Returns its seq, or 0 if
  // dropped.
  std::uint64_t append(const std::uint64_t* words) noexcept {
    const std::uint64_t seq = layout::fetch_add(head_, 1) + 1;
    const std::uint64_t index = (seq - 1) & mask_;
    const std::uint32_t k = layout::ring_chunk_of(index, first_chunk_);
    std::uint64_t* chunk = chunks_[k].load(std::memory_order_acquire);
    if (__builtin_expect(chunk == nullptr, 0)) chunk = add_chunk(k);
    if (chunk == nullptr) {
      layout::fetch_add(dropped_, 1);
      return 0;
    }
    std::uint64_t* rec =
        chunk + (index - layout::ring_chunk_start(k, first_chunk_)) * record_words_;
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
    prefetch(index + 1);
    return seq;
  }

  // Owned mode, from the ring's one writer: the same without a locked instruction. The head
  // word is published after the record, so a reader never waits on a claimed seq.
  std::uint64_t append_owned(const std::uint64_t* words) noexcept {
    return append_owned_words(words, record_words_);
  }
  // append_owned() for a ring whose records are N words (N == record_words_): the record's
  // stores unrolled, its offset a constant multiply (the event lanes: every traced event).
  template <std::uint32_t N> std::uint64_t append_owned_n(const std::uint64_t* words) noexcept {
    return append_owned_words(words, N);
  }

  // Owned mode: starts loading, for writing, the record the next append_owned() writes.
  void prefetch_next() const noexcept { prefetch(last_); }

private:
  // Inlined into both append_owned forms; `words_per` is record_words_ (a constant in the
  // second).
  __attribute__((always_inline)) std::uint64_t
  append_owned_words(const std::uint64_t* words, std::uint32_t words_per) noexcept {
    const std::uint64_t seq = last_ + 1;
    if (__builtin_expect(seq - 1 == grow_at_, 0)) grow();
    const std::uint64_t index = (seq - 1) & mask_;
    const std::uint32_t k = layout::ring_chunk_of(index, first_chunk_);
    std::uint64_t* chunk = chunks_[k].load(std::memory_order_relaxed); // ours, never null
    std::uint64_t* rec = chunk + (index - layout::ring_chunk_start(k, first_chunk_)) * words_per;
    layout::store_word(rec, 2 * seq - 1); // odd before any other word changes: the release
#pragma GCC unroll 16
    for (std::uint32_t i = 1; i < words_per; ++i) // stores keep it first (plain on x86)
      layout::store_release(rec + i, words[i]);
    layout::store_release(rec, 2 * seq);
    layout::store_release(head_, seq);
    last_ = seq;
    // The next record follows this one in its chunk unless index + 1 starts a chunk (0, then
    // first_chunk_ << j: a power of two at least first_chunk_) or wraps (mask_ + 1, also one).
    const std::uint64_t next = index + 1;
    if ((next & (next - 1)) != 0 || next < first_chunk_)
      __builtin_prefetch(rec + words_per, 1);
    else
      prefetch(next);
    return seq;
  }
  void prefetch(std::uint64_t index) const noexcept {
    index &= mask_;
    const std::uint32_t k = layout::ring_chunk_of(index, first_chunk_);
    if (const std::uint64_t* chunk = chunks_[k].load(std::memory_order_relaxed))
      __builtin_prefetch(
          chunk + (index - layout::ring_chunk_start(k, first_chunk_)) * record_words_, 1);
  }
  // Slow path: the first visit of chunk k. `late`: as trace_space::allocate's.
  std::uint64_t* add_chunk(std::uint32_t k, bool* late = nullptr) noexcept;
  // Owned mode, slow path at grow_at_: a lead before the last chunk's end (a quarter of it at
  // first), announces the next chunk to the trace (trace_space::prepare: its pages made ready
  // off this thread); at the chunk's start, adds it or wraps where the ring is.
  void grow() noexcept;
  void announce() noexcept; // the next chunk, unless the budget will refuse it

  trace_space* space_ = nullptr;
  layout::extent* dir_ = nullptr;
  std::uint64_t mask_ = 0;
  std::uint64_t first_chunk_ = 1;
  std::uint32_t record_words_ = 0;
  std::uint64_t* head_ = nullptr;
  std::uint64_t* dropped_ = nullptr;
  std::atomic<std::uint64_t*> chunks_[layout::k_max_extents] = {};
  spin_mutex mu_;        // add_chunk only
  bool refused_ = false; // under mu_: the trace had no room for a chunk
  std::atomic<std::int64_t>* budget_ = nullptr;
  // Owned mode (the writer's own: no other thread touches them while it owns the ring).
  std::uint64_t capacity_ = 0; // the most records the ring may grow to
  std::uint64_t* size_word_ = nullptr;
  std::uint64_t last_ = 0;                    // seq of the last record
  std::uint64_t grow_at_ = ~std::uint64_t{0}; // index of grow()'s next call; ~0: no growth
  std::uint64_t next_at_ = ~std::uint64_t{0}; // index where the next chunk starts
  // The announcement's lead: the last chunk's records >> lead_shift_. Each chunk the trace
  // had to make on this thread (late) halves the shift, down to 0 (at the chunk's start).
  std::uint32_t lead_shift_ = 2;
};

// Reader side: a ring section of a trace image, its chunks checked once.
class ring_view {
public:
  // false (and *problem set) when the section's shape is wrong; chunks that lie outside the
  // image are skipped (their records read as lost) and counted in *corrupt.
  bool open(const std::byte* base, std::uint64_t size, const layout::section& section,
            const layout::extent* dir, std::uint32_t record_words, std::uint64_t* corrupt,
            const char** problem);
  std::uint64_t capacity() const noexcept { return capacity_; }
  // Bytes of the chunks that are there (together never more than the image).
  std::uint64_t bytes() const noexcept { return bytes_; }
  // Copies the record for `seq` into out[0 .. record_words) (out[0] = 2*seq). Returns false if
  // the slot is missing, holds another seq, is being written (after bounded retries) or was
  // overwritten while being copied.
  bool read(std::uint64_t seq, std::uint64_t* out) const noexcept;
  // The seqs in [first, last] whose slots lie in chunks that are there, in order: what a
  // reader may try to read(), never more than the image holds (a hostile head or capacity
  // cannot make a reader loop over 2^40 missing records).
  std::vector<std::uint64_t> seqs_present(std::uint64_t first, std::uint64_t last) const;
  // Byte offset in the image of the record for `seq` (for error messages); 0 if missing.
  std::uint64_t offset_of(std::uint64_t seq) const noexcept;

private:
  const std::byte* base_ = nullptr;
  const std::uint64_t* chunks_[layout::k_max_extents] = {};
  std::uint64_t capacity_ = 0, first_chunk_ = 1, bytes_ = 0;
  std::uint32_t record_words_ = 0, chunk_count_ = 0;
};

} // namespace gmem::trace
