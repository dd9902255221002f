// The trace writer: formats a memory region (shared memory, or a plain buffer in tests) in the
// trace layout and records into it. It knows nothing about shared-memory objects, options or
// threads; profiler/recorder/recorder.h owns those.
//
// Thread safety: alloc/free/segment/fence/trim/oom/marker/option/capture_stack may be called
// from any number of threads at once and never block (lock-free, see seq_ring.h,
// live_table.h, intern_table.h). update_modules() and sample() take a writer-side mutex;
// readers never take it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "profiler/format/intern_table.h"
#include "profiler/format/live_table.h"
#include "profiler/format/module_map.h"
#include "profiler/format/seq_ring.h"
#include "profiler/format/trace_clock.h"
#include "profiler/format/trace_layout.h"
#include "profiler/format/trace_space.h"
#include "profiler/format/trace_types.h"
#include "profiler/recorder/event_lanes.h"
#include "profiler/recorder/waiting_frames.h"

namespace gmem::trace {

// Capacities (records): the most each section may grow to. A trace starts with a small first
// extent of each (k_first_* in trace_writer.cpp: under 1 MiB in all) and grows as it fills,
// up to these and to the byte limit its backing allows.
struct writer_config {
  std::uint64_t live_slots = std::uint64_t{1} << 21; // holds >= 1M live allocations
  std::uint32_t live_shards = 16; // tables the live slots are spread over (at most 24)
  std::uint64_t segment_slots = std::uint64_t{1} << 14;
  std::uint64_t events = std::uint64_t{1} << 19; // all lanes together (one may hold all)
  std::uint32_t event_lanes = 64; // lanes: threads that record at once without sharing one
  std::uint64_t samples = std::uint64_t{1} << 14;
  std::uint64_t stack_slots = std::uint64_t{1} << 16;
  std::uint64_t stack_ips = std::uint64_t{1} << 20; // words
  std::uint64_t string_slots = std::uint64_t{1} << 14;
  std::uint64_t string_bytes = std::uint64_t{1} << 21;
  std::uint64_t module_slots = 1024;
  std::uint32_t device_slots = 64;
  std::uint32_t stack_depth = 16;  // 0 = no native frames
  std::uint32_t python_depth = 16; // Python frames (profiler/recorder/python_frames.h); 0 = none
  std::uint64_t sample_interval_ns = 100'000'000;

  // Powers of two, minimums and maximums applied.
  writer_config normalized() const;
  // Bytes of address space the writer may need at most: enough that growth never runs out of
  // mapping before it reaches the capacities (shards rehash into new extents, so more than
  // the sum of the sections).
  std::uint64_t map_bytes() const;
};

// Who is writing: header identity fields.
struct process_identity {
  std::uint32_t pid = 0;
  std::uint64_t proc_start_ticks = 0;
  std::uint64_t start_realtime_ns = 0;
  std::uint64_t start_monotonic_ns = 0;
  std::vector<std::string> argv;
  std::string options;               // "GMEM_X=v\n" lines
  static process_identity current(); // this process: /proc/self/{stat,cmdline}, environ
};

class trace_writer {
public:
  // Formats `memory`, a mapping of `map_bytes` (>= config.normalized().map_bytes()) whose first
  // layout::k_header_bytes are zero and usable; it grows through `backing` (or, without one,
  // into the rest of the mapping). The caller keeps it mapped for the writer's
  // lifetime. The magic is written last, so a reader never sees a half-formatted header as
  // valid. ok() says whether the first extents fitted.
  trace_writer(void* memory, std::uint64_t map_bytes, const writer_config& config,
               const process_identity& who, trace_backing* backing = nullptr);
  trace_writer(const trace_writer&) = delete;
  trace_writer& operator=(const trace_writer&) = delete;
  bool ok() const noexcept { return ok_; }

  void alloc(std::uintptr_t addr, std::size_t requested, std::size_t rounded, int device,
             std::uintptr_t stream, alloc_kind kind, std::uint32_t stack) noexcept;
  void free(std::uintptr_t addr, int device, std::uintptr_t stream, alloc_kind kind) noexcept;
  // stitched: a stitched range (pool_options::stitch), address space over arena pages that
  // maps no memory of its own (docs/trace-format.md, segment flags).
  void segment(bool mapped, std::uintptr_t base, std::size_t bytes, int device,
               bool stitched = false) noexcept;
  void fence(int device, std::uint64_t duration_ns, std::size_t released_bytes) noexcept;
  void trim(int device, std::size_t released_bytes) noexcept;
  void oom(int device, std::size_t requested, const pool_stats& at_failure) noexcept;
  void marker(std::string_view label) noexcept;
  void option(std::string_view name, std::string_view value) noexcept;

  // Stores a stack (ips innermost first); returns its id, 0 if none or no room. The calling
  // thread's recent stacks are remembered with their ids (stack_memo.h), so repeating the last
  // one costs one compare and one of the others a hash and one compare.
  std::uint32_t intern_stack(const std::uintptr_t* ips, unsigned count) noexcept;
  // Captures the caller's stack at the configured depth, skipping `skip` more frames, and the
  // Python frames of a thread holding the GIL (python_frames.h) after the native ones.
  std::uint32_t capture_stack(unsigned skip) noexcept;
  // The calling Python thread starts waiting in `kind`'s engine: its Python frames, less the
  // `skip` innermost (the caller's own wrapper), are lent to the engine's worker threads until
  // wait_end(token) (waiting_frames.h). Returns the token, 0 when nothing was registered.
  std::uint32_t wait_begin(wait_kind kind, unsigned skip) noexcept;
  void wait_end(std::uint32_t token) noexcept;
  // Stack and Python depths are 0: capture_stack() would only call prefetch_event() and
  // return 0, which its caller can do without the call.
  bool stacks_off() const noexcept { return config_.stack_depth == 0 && config_.python_depth == 0; }
  // Starts loading the line of the calling thread's next event (before the work that comes
  // ahead of recording it).
  void prefetch_event() const noexcept { events_.prefetch(); }
  std::uint32_t intern_string(std::string_view text) noexcept;

  void update_modules(const std::vector<module_info>& now) noexcept;
  // Stores the counters of `n` pools (device counters table, and the sample ring).
  void sample(const device_stats* stats, std::size_t n, sample_reason reason) noexcept;
  // Refreshes the heartbeat, the clock calibration and the live count (sampler thread).
  void heartbeat() noexcept;
  // The header says the process shut down; the object gives back what was backed ahead of use.
  void mark_shutdown() noexcept;
  // Marks that framework's allocator as observed per allocation (a header flag), or no longer
  // (observation stopped: readers then treat its cache as unobserved).
  void mark_observed(observed_framework framework, bool observed = true) noexcept;
  // An allocation (or free) of a framework's allocator observed from `since` (now_ticks() at
  // the observer's entry) to now, stacks included: counted on the calling thread's lane.
  void observed(bool alloc, std::uint64_t since) noexcept {
    events_.add_observed(alloc, now_ticks() - since);
  }
  // Every lane's observed_* words added up, in ns.
  observe_cost observed_cost() const noexcept;

  const writer_config& config() const noexcept { return config_; }
  // Bytes in use now (the trace grows; readers copy this many).
  std::uint64_t total_bytes() const noexcept;
  std::uint64_t live_count() const noexcept { return live_.live_count(); }
  const void* data() const noexcept { return header_; }
  // Checks every table; only meaningful while no other thread writes.
  bool is_valid() const;

private:
  // On a worker thread while a thread waits: the lent note and the waiter's frames, at most
  // `room` frames; the words written (0: none).
  unsigned append_lent(std::uint64_t* out, unsigned room) noexcept;
  std::uint64_t write_stat_record(std::uint64_t* record, std::uint64_t state_or_zero, int device,
                                  sample_reason reason, const pool_stats& stats) noexcept;
  void emit(event_type type, int device, alloc_kind kind, std::uintptr_t address,
            std::uint64_t size, std::uint64_t size2, std::uintptr_t stream, std::uint32_t ref,
            std::uint64_t tick, std::uint32_t thread) noexcept;
  // The same, stamped now by the calling thread.
  void emit(event_type type, int device, alloc_kind kind, std::uintptr_t address,
            std::uint64_t size, std::uint64_t size2, std::uintptr_t stream,
            std::uint32_t ref) noexcept;

  const std::uint64_t serial_; // this process's writers, counted from 1 (intern_stack's memo)
  writer_config config_;
  layout::header* header_ = nullptr;
  trace_space space_;
  bool ok_ = false;
  std::uint64_t* counters_ = nullptr; // the per-device counter records
  event_lanes events_;
  seq_ring samples_;
  live_table live_;
  live_table segments_;
  intern_table stacks_;
  intern_table strings_;
  module_table modules_;
  std::mutex mu_; // serializes update_modules() and sample(); readers never take it
  std::vector<int> device_of_slot_;
  std::atomic<std::uint64_t> sample_updates_{0};
};

} // namespace gmem::trace
