// Decoded, validated trace records: what the reader (profiler/reader/trace_reader.h) produces and
// the gmem tool analyses. Nothing here points into shared memory; every string is copied, every id
// is checked (a stack id either resolves through trace::stack() or is 0).
//
// Times: `time_ns` fields are nanoseconds since recording began (monotonic clock of the traced
// process); add trace_info::start_realtime_ns for wall-clock time.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pool/stats.h"
#include "profiler/format/trace_types.h"

namespace gmem::trace {

// The trace format version this build writes (docs/trace-format.md). It also reads versions 2
// (k_oldest_format_version: no Python frames, no python_depth), 3 (one event ring instead of
// lanes) and 4 (no tensor kind, no observed-framework flags).
inline constexpr std::uint32_t k_format_version = 5;
inline constexpr std::uint32_t k_oldest_format_version = 2;

enum class trace_state : std::uint8_t {
  running, // the writer process is alive (same pid and start time)
  exited,  // shutdown() ran: the program exited normally
  crashed, // the process is gone and never reached shutdown(): killed, crashed or _exit()
};
const char* to_string(trace_state state) noexcept; // "running", "exited", "crashed"

struct trace_info {
  std::uint32_t format_version = 0;
  std::uint32_t pid = 0;
  std::uint64_t proc_start_ticks = 0;      // /proc/<pid>/stat field 22; pid + this = the process
  std::uint64_t start_realtime_ns = 0;     // Unix time when recording began
  std::uint64_t heartbeat_realtime_ns = 0; // last sampler tick; stale + not running = dead
  std::uint64_t exit_realtime_ns = 0;      // when shutdown() ran; 0 if it never did
  std::vector<std::string> argv;           // /proc/self/cmdline at start
  std::string command_line;                // argv joined with spaces
  std::vector<std::pair<std::string, std::string>> options; // GMEM_* variables at start
  std::uint32_t stack_depth = 0;                            // frames captured per stack; 0 = off
  std::uint32_t python_depth = 0;       // Python frames captured per stack; 0 = off (or format 2)
  std::uint64_t sample_interval_ns = 0; // sampler period
  std::string source;                   // "shm gmem.<pid>.<ticks>.<nonce>" or the file's path
  std::string object;                   // the shared-memory object's name; "" for a file
  bool saved_file = false;     // read from a file (gmem save / GMEM_TRACE_SAVE), not live memory
  std::int64_t owner_uid = -1; // who owns the object or file read (fstat); -1 unknown
  trace_state state = trace_state::crashed;
  std::uint64_t total_bytes = 0;  // bytes in use (the object grows with what it records)
  std::uint64_t copied_bytes = 0; // bytes the reader read of it (read_options::max_copy_bytes)
  // A bounded read (read_options::max_copy_bytes): the sections (a bit per section id) cut or
  // left out; their records are missing from this decode.
  std::uint32_t cut_sections = 0;
  std::uint64_t limit_bytes = 0;     // the most the writer could let it grow to
  bool full = false;                 // it reached its limit (or /dev/shm's): records were lost
  std::uint64_t exit_live_count = 0; // allocations outstanding when shutdown() ran
  // Bit observed_framework: that framework's allocator was observed per allocation (its
  // tensors are in the trace under alloc_kind::tensor, its segments are its cache).
  std::uint32_t observed_frameworks = 0;
  std::uint64_t live_capacity = 0;   // most slots of the live allocation table
  std::uint64_t event_capacity = 0;  // events the ring holds
  std::uint64_t sample_capacity = 0; // counter samples the sample ring holds
};

// The pool's counters for one device as last sampled (GMEM_POOL_STATS). Counters this build
// does not know (a newer writer) are kept by name in `unknown`; ones the writer did not have
// stay 0 and are listed in `missing`.
struct device_counters {
  int device = 0; // CUdevice ordinal; -1 = host (pinned) pool
  std::uint64_t time_ns = 0;
  pool_stats stats;
  std::vector<std::pair<std::string, std::uint64_t>> unknown;
  std::vector<std::string> missing;
};

struct live_allocation {
  std::uintptr_t address = 0;
  std::uint64_t requested = 0; // bytes the program asked for
  std::uint64_t rounded = 0;   // bytes the pool reserved for it
  int device = 0;
  std::uintptr_t stream = 0; // CUstream value; ~0 = stream-less (cuMemAlloc)
  alloc_kind kind = alloc_kind::device;
  std::uint32_t thread = 0; // Linux thread id
  std::uint64_t time_ns = 0;
  std::uint32_t stack_id = 0; // 0 = none
  // Freed only after the program's own code had ended (an interpreter's shutdown released
  // it): still held by the program at its end, reported with the outstanding ones.
  bool held = false;
};

struct live_segment {
  std::uintptr_t base = 0;
  std::uint64_t bytes = 0;
  int device = 0;
  std::uint64_t time_ns = 0;
  // A stitched range: address space mapping free arena pages (counts no reserved bytes; its
  // bytes are arena memory lent to it, which the arena's map shows as gaps).
  bool stitched = false;
};

// One ring record. Field use by type (others are 0):
//   alloc:        address, size = requested, size2 = rounded, stream, kind, stack_id
//   free:         address, size = requested, size2 = rounded (0 when the live table missed it),
//                 stream, kind
//   segment_map / segment_unmap: address = base, size = bytes, size2 = flags
//                 (k_segment_stitched: a stitched range)
//   fence:        size = released bytes, size2 = duration ns
//   trim:         size = released bytes
//   oom:          size = requested, size2 = seq of its sample in `samples` (0 = none)
//   option, marker: label
struct event {
  // 1, 2, ... in time order (format 4: the lanes merged by stamp); format 2-3: the ring's seq,
  // gaps = lost events.
  std::uint64_t seq = 0;
  event_type type = event_type::marker;
  std::uint64_t time_ns = 0;
  std::uint32_t thread = 0;
  int device = 0;
  std::uintptr_t address = 0;
  std::uint64_t size = 0;
  std::uint64_t size2 = 0;
  std::uintptr_t stream = 0;
  alloc_kind kind = alloc_kind::device;
  std::uint32_t stack_id = 0;
  std::string label; // marker / option text, at most 256 bytes
};

// Where Python code lives: one per code object the writer saw, shared by the frames naming it
// (a hostile trace naming one long string from every frame must not multiply it).
struct python_location {
  std::string file;     // co_filename as Python saw it
  std::string function; // co_qualname (3.11+) or co_name
};
// A Python frame recorded with an allocation (the thread held the GIL).
struct python_frame {
  std::uint32_t location = 0; // key of trace::python_locations; unknown keys print as "?"
  std::uint32_t line = 0;
};
// Why a stack of a Python process has no Python frames.
enum class python_note : std::uint8_t {
  none,       // frames recorded (or no interpreter: then the stack has no python entry)
  no_gil,     // the allocating thread ran no Python code (e.g. PyTorch's autograd threads)
  finalizing, // the interpreter was shutting down (or not initialized)
};
// Whose frames follow frames[lent_from]: the thread's own come first; from lent_from on they
// are another thread's, lent while this one worked for it (waiting_frames.h in the recorder).
enum class python_lender : std::uint8_t {
  none,     // every frame is the allocating thread's own
  backward, // a Python thread waiting in PyTorch's backward() (an autograd engine thread allocated)
};
struct python_stack {
  std::vector<python_frame> frames; // innermost first
  python_note note = python_note::none;
  python_lender lender = python_lender::none;
  std::uint32_t lent_from = 0; // frames[lent_from..] are the lender's (with a lender)
  std::uint32_t waiting = 0;   // threads waiting when it was recorded (> 1: the latest one's)
};

// Counter samples for timelines (periodic), OOM snapshots and the final state.
struct stat_sample {
  std::uint64_t seq = 0;
  std::uint64_t time_ns = 0;
  int device = 0;
  sample_reason reason = sample_reason::periodic;
  pool_stats stats;
};

struct module {
  std::string path;             // absolute path of the ELF file ("" if unknown)
  std::uintptr_t load_bias = 0; // file address = ip - load_bias
  std::uintptr_t start = 0;     // first mapped byte (lowest PT_LOAD)
  std::uint64_t size = 0;       // [start, start + size) holds its code and data
  std::string build_id;         // lower-case hex of NT_GNU_BUILD_ID, "" if none
  bool loaded = true;           // false once dlclose() removed it
};

// Everything that was not, or could not be, recorded. Nonzero values belong in reports.
struct trace_losses {
  std::uint64_t lost_events = 0; // events recorded but not decoded (lapped, torn or dropped)
  std::uint64_t last_seq = 0;    // events recorded in total
  // 0: every event since the start is there (but for torn or dropped ones). Else a lane (or the
  // ring) lapped: events before this time may be missing; from it on none is missing by lapping.
  std::uint64_t history_from_ns = 0;
  std::uint64_t live_overflow = 0;    // allocations the full live table could not hold
  std::uint64_t unmatched_frees = 0;  // frees of addresses not in the live table
  std::uint64_t stack_overflow = 0;   // stacks not stored (table or arena full)
  std::uint64_t string_overflow = 0;  // labels/paths not stored
  std::uint64_t module_overflow = 0;  // modules not stored
  std::uint64_t lost_samples = 0;     // counter samples lapped or torn
  std::uint64_t torn_records = 0;     // records mid-update after bounded retries, or malformed
  std::uint64_t segment_overflow = 0; // segments the live segment table could not hold
  std::uint64_t growth_refused = 0;   // extents the trace wanted but had no room for
  std::uint64_t dropped_events = 0;   // events not written (no room, or a slot still busy)
};

// How long the process ran with its trace: to its exit, or to the last heartbeat while it runs.
inline std::uint64_t recorded_wall_ns(const trace_info& i) {
  const std::uint64_t end = i.exit_realtime_ns != 0 ? i.exit_realtime_ns : i.heartbeat_realtime_ns;
  return end > i.start_realtime_ns ? end - i.start_realtime_ns : 0;
}

struct trace {
  trace_info info;
  observe_cost observed;
  std::vector<device_counters> devices;
  std::vector<live_allocation> live;  // sorted by address
  std::vector<live_segment> segments; // sorted by base
  std::vector<event> events;          // sorted by seq (time)
  std::vector<stat_sample> samples;   // sorted by seq
  std::unordered_map<std::uint32_t, std::vector<std::uintptr_t>>
      stacks; // id -> native ips, innermost first
  // id -> Python frames, for the stacks recorded while an interpreter was loaded.
  std::unordered_map<std::uint32_t, python_stack> python_stacks;
  std::unordered_map<std::uint32_t, python_location> python_locations;
  std::vector<module> modules;
  trace_losses losses;

  // The ips of a stack id, or nullptr for 0 and unknown ids.
  const std::vector<std::uintptr_t>* stack(std::uint32_t id) const {
    auto it = stacks.find(id);
    return it == stacks.end() ? nullptr : &it->second;
  }
  // The Python part of a stack id, or nullptr when it has none.
  const python_stack* python(std::uint32_t id) const {
    auto it = python_stacks.find(id);
    return it == python_stacks.end() ? nullptr : &it->second;
  }
  const python_location& location(const python_frame& f) const {
    static const python_location unknown{"?", "?"};
    auto it = python_locations.find(f.location);
    return it == python_locations.end() ? unknown : it->second;
  }
  // The module holding `ip`, or nullptr.
  const module* module_of(std::uintptr_t ip) const {
    for (const auto& m : modules)
      if (ip >= m.start && ip - m.start < m.size) return &m;
    return nullptr;
  }
};

} // namespace gmem::trace
