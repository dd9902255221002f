// The event section (format 4): lanes of events, one per writing thread. A thread's first
// event claims a lane, which it then writes alone with plain stores (seq_ring's owned mode):
// recording an event takes no locked instruction and shares no cache line with other
// threads. Threads beyond the lanes write lane 0, a shared ring. A thread's lane goes back to
// the pool when the thread exits, and the next thread to claim it continues its numbering.
//
// Readers merge the lanes by time stamp (profiler/reader/trace_reader.cpp): the order between
// threads is the order of their TSC stamps, which the hooks take on the right side of the
// pool's lock (a free's before the block goes back, an allocation's after it came out).
//
// Memory: a lane starts with `first_chunk` records and doubles while it has not wrapped, as
// long as the lanes' shared budget (the events capacity) and the trace allow; then it wraps.
// One busy thread may thus hold the whole budget; later threads get what is left, at least a
// first chunk each while there is room.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "profiler/format/seq_ring.h"
#include "profiler/format/trace_layout.h"
#include "profiler/format/trace_space.h"

namespace gmem::trace {

struct lane_registry; // the lanes' state shared with the threads' exit handlers

// The calling thread's lane: the ring it writes in the event_lanes numbered t_lane_owner
// (initial-exec TLS: one compare on the hot path). Scalars, not one struct: UBSan checks a
// member access to a TLS struct for null with the flags of an `add` that the linker relaxes
// into a `lea` in an executable, and then reports a null pointer that is not there.
extern constinit thread_local std::uint64_t t_lane_owner __attribute__((tls_model("initial-exec")));
extern constinit thread_local seq_ring* t_lane_ring __attribute__((tls_model("initial-exec")));
// The lane's descriptor in the trace (its observed_* words).
extern constinit thread_local std::uint64_t* t_lane_words
    __attribute__((tls_model("initial-exec")));

class event_lanes {
public:
  event_lanes();
  ~event_lanes();
  event_lanes(const event_lanes&) = delete;
  event_lanes& operator=(const event_lanes&) = delete;

  // Formats the events section of the trace in `space`: `lanes` descriptors (lane 0 shared,
  // `shared_capacity` records, its first chunk allocated now); every other lane grows from
  // `first_chunk` to at most `capacity` records, all of them together at most `budget`
  // records. Powers of two. Returns false when there is no room for the table or lane 0.
  bool open(trace_space* space, layout::header* h, std::uint32_t lanes, std::uint64_t capacity,
            std::uint64_t shared_capacity, std::uint64_t first_chunk,
            std::uint64_t budget) noexcept;

  // Writes words[1 .. event_word::count) as the calling thread's next event. Returns its seq
  // in its lane, or 0 if dropped.
  std::uint64_t append(const std::uint64_t* words) noexcept {
    if (__builtin_expect(t_lane_owner == serial_, 1))
      return t_lane_ring->append_owned_n<layout::event_word::count>(words);
    return append_slow(words);
  }
  // Starts loading the line the calling thread's next event goes to.
  void prefetch() const noexcept {
    if (t_lane_owner == serial_) t_lane_ring->prefetch_next();
  }
  // Lanes held by threads now (lane 0 not counted).
  std::uint32_t lanes_claimed() const noexcept;

  // Adds one observed allocation (or free) that took `ticks` of the calling thread's time to
  // its lane's observed_* words: plain stores to a line only this thread writes (lane 0, the
  // shared one: atomic adds). Call after the event was appended (its lane is claimed then).
  void add_observed(bool alloc, std::uint64_t ticks) noexcept {
    namespace lw = layout::lane_word;
    const unsigned at = alloc ? lw::observed_allocs : lw::observed_frees;
    if (__builtin_expect(t_lane_owner == serial_, 1)) {
      std::uint64_t* d = t_lane_words;
      layout::store_word(d + at, layout::load_word(d + at) + 1);
      layout::store_word(d + at + 1, layout::load_word(d + at + 1) + ticks);
      return;
    }
    add_observed_shared(at, ticks);
  }
  struct observed_totals {
    std::uint64_t allocs = 0, alloc_ticks = 0, frees = 0, free_ticks = 0;
  };
  // The observed_* words of all lanes added up (lanes of threads still running included).
  observed_totals observed() const noexcept;

private:
  std::uint64_t append_slow(const std::uint64_t* words) noexcept;
  void add_observed_shared(unsigned at, std::uint64_t ticks) noexcept;
  bool claim() noexcept;

  const std::uint64_t serial_; // never reused: a thread's TLS cannot name a freed instance
  std::shared_ptr<lane_registry> registry_;
};

} // namespace gmem::trace
