// The trace's byte layout, shared by the writer and the reader, pinned by static_asserts and
// documented byte by byte in docs/trace-format.md. Little-endian, 64-bit words.
//
// A trace is: an 8192-byte header, then extents (64-byte aligned runs of records) that the
// writer allocates as the trace grows, one after the other: the object starts small and grows
// with what it records (live allocations, stacks, events) up to a limit. Each section (live
// table, event ring, ...) is described by a header entry and a directory of up to
// k_max_extents extents in the header's second page; what an extent means depends on the
// section's kind (section_kind below). Every record is a whole number of 64-bit words; words
// that another process may read while they change are accessed with atomic loads and stores
// only (load_word/store_word below).
//
// Change anything here => bump k_format_version (trace_model.h) and the doc.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "profiler/format/trace_model.h"

namespace gmem::trace::layout {

inline constexpr char k_magic[8] = {'G', 'M', 'E', 'M', 'T', 'R', 'C', '\0'};
inline constexpr std::uint32_t k_header_bytes = 8192;
inline constexpr std::uint64_t k_section_align = 64;
inline constexpr std::uint32_t k_max_stats = 64;   // stat name slots in the header
inline constexpr std::uint32_t k_max_extents = 24; // directory entries per section
// Device ids a writer records: k_host_device (the pinned host pools) and CUDA ordinals up to
// k_max_device (no host has more). The counters section holds one record per device, at most
// k_max_device_slots; the sample ring at most k_max_samples records. A reader refuses
// anything else: a trace another user forged must not cost more than the writer's would.
inline constexpr int k_host_device = -1;
inline constexpr int k_max_device = 1023;
inline constexpr std::uint32_t k_max_device_slots = 1024;
inline constexpr std::uint64_t k_max_samples = std::uint64_t{1} << 24;
constexpr bool valid_device(std::int64_t device) {
  return device >= k_host_device && device <= k_max_device;
}

enum section_id : std::uint32_t {
  k_counters = 0,     // per-device counter records (stat records, seqlocked)       fixed
  k_live = 1,         // live allocation table (live records)                        shards
  k_segments = 2,     // live segment table (live records)                           shards
  k_events = 3,       // event lanes (format 4; lane descriptors) or ring (2, 3)     lanes
  k_samples = 4,      // counter sample ring (stat records)                          ring
  k_stack_slots = 5,  // stack dedup table (16-byte slots)                           levels
  k_stack_ips = 6,    // instruction pointers of stored stacks (8-byte words)        arena
  k_string_slots = 7, // string intern table (16-byte slots)                         levels
  k_string_bytes = 8, // bytes of stored strings                                     arena
  k_modules = 9,      // module map (module records)                                 fixed
  k_section_count = 10,
};
inline constexpr std::uint32_t k_section_slots = 16; // entries in the header's table

// How a section's extents are laid out (fixed by its id, checked by the reader):
//   fixed:  one extent of `capacity` records.
//   shards: extent_count hash tables (power-of-two capacities); an address lives in shard
//           shard_of(address, extent_count). A shard's table is replaced (rehashed into a new
//           extent) while dir_version is odd; a reader retries when dir_version changed.
//   ring:   `capacity` (a power of two) records in ring order, stored in chunks: chunk 0 holds
//           records [0, c0), chunk k >= 1 holds [c0 * 2^(k-1), c0 * 2^k), c0 = extent 0's
//           capacity. A chunk's offset is 0 until the ring first reaches it.
//   levels: hash tables added as the section fills (extent_count grows); ids number the slots
//           of all levels in order, from 1: level k's slot j is id (sum of earlier levels'
//           capacities) + j + 1. The capacities add up to at most `capacity`.
//   arena:  chunks added as the section fills; intern refs name elements by their absolute
//           position in the trace (byte offset / element size), inside one chunk.
//   lanes:  (the events, from format 4) one extent of `extent.capacity` lane descriptors
//           (lane_word below), each a ring of event records with its own chunk directory.
//           Lane 0 is shared by any number of threads; every other lane has one writer thread
//           at a time. `capacity`: the most records one lane may hold.
enum class section_kind : std::uint8_t { fixed, shards, ring, levels, arena, lanes };
constexpr section_kind kind_of(std::uint32_t id) {
  switch (id) {
  case k_live:
  case k_segments:
    return section_kind::shards;
  case k_events:
    return section_kind::lanes; // format 2 and 3: ring
  case k_samples:
    return section_kind::ring;
  case k_stack_slots:
  case k_string_slots:
    return section_kind::levels;
  case k_stack_ips:
  case k_string_bytes:
    return section_kind::arena;
  default:
    return section_kind::fixed;
  }
}

struct section {
  std::uint64_t capacity;     // records: the ring's size, or the most the section may hold
  std::uint32_t record_bytes; // multiple of 8 (1 for the string arena)
  std::uint32_t extent_count; // directory entries in use (only grows, published with release)
  std::uint64_t dir_version;  // shards: odd while a shard's table is being replaced
  std::uint64_t reserved;
};
static_assert(sizeof(section) == 32);

struct extent {
  std::uint64_t offset;   // from the start of the trace; multiple of 64; 0 = not allocated
  std::uint64_t capacity; // records in this extent
};
static_assert(sizeof(extent) == 16);

// Words written once before the object gets its final name are plain; the rest ("mutable")
// live from byte 1024 on, one 64-byte line per writer group so writers don't false-share.
struct header {
  char magic[8];                         // 0
  std::uint32_t format_version;          // 8
  std::uint32_t header_bytes;            // 12
  std::uint64_t total_bytes;             // 16: bytes in use; grows (atomic), never shrinks
  std::uint32_t pid;                     // 24
  std::uint32_t stack_depth;             // 28
  std::uint64_t proc_start_ticks;        // 32
  std::uint64_t start_realtime_ns;       // 40
  std::uint64_t start_monotonic_ns;      // 48
  std::uint64_t sample_interval_ns;      // 56
  std::uint32_t cmdline_string;          // 64: string id, argv NUL-separated
  std::uint32_t options_string;          // 68: string id, "NAME=value\n" lines
  std::uint32_t stat_count;              // 72: counters per stat record the writer filled
  std::uint32_t stat_slots;              // 76: value words per stat record (>= stat_count)
  std::uint32_t section_count;           // 80
  std::uint32_t python_depth;            // 84: Python frames captured per stack (format 3)
  std::uint64_t limit_bytes;             // 88: the most the writer lets total_bytes grow to
  std::uint64_t reserved1[4];            // 96
  section sections[k_section_slots];     // 128
  std::uint32_t stat_names[k_max_stats]; // 640: string ids of the writer's stat names, in order
  std::uint64_t reserved2[16];           // 896
  // ---- mutable, from byte 1024 ----
  std::uint64_t event_head;    // 1024: format 2, 3: seq of the last claimed event; 4: 0
  std::uint64_t event_dropped; // 1032: format 2, 3: events not written; 4: 0 (see lane_word)
  std::uint64_t pad16[6];
  std::uint64_t live_count;      // 1088: live allocations in the table
  std::uint64_t live_overflow;   // 1096: allocations the live table had no slot for
  std::uint64_t unmatched_frees; // 1104: frees of addresses not found in the live table
  std::uint64_t pad17[5];
  std::uint64_t segment_count;     // 1152
  std::uint64_t segment_overflow;  // 1160
  std::uint64_t segment_unmatched; // 1168
  std::uint64_t pad18[5];
  std::uint64_t stack_count;    // 1216: stacks stored
  std::uint64_t stack_overflow; // 1224: stacks not stored
  std::uint64_t stack_ips_used; // 1232: words of the stack arena in use
  std::uint64_t pad19[5];
  std::uint64_t string_count;      // 1280
  std::uint64_t string_overflow;   // 1288
  std::uint64_t string_bytes_used; // 1296: bytes of the string arena in use
  std::uint64_t pad20[5];
  std::uint64_t module_count;    // 1344: module records published
  std::uint64_t module_overflow; // 1352
  std::uint64_t pad21[6];
  std::uint64_t sample_head;    // 1408: seq of the last claimed sample
  std::uint64_t sample_dropped; // 1416
  std::uint64_t pad22[6];
  std::uint64_t heartbeat_realtime_ns; // 1472: refreshed by the sampler thread
  std::uint64_t exit_realtime_ns;      // 1480: set by shutdown()
  std::uint64_t flags;                 // 1488: k_flag_*
  std::uint64_t exit_live_count;       // 1496: live allocations when shutdown() ran
  std::uint64_t pad23[4];
  // Clock calibration, seqlocked by clock_version: monotonic ns = mono0 + (tick - tick0) *
  // (mono1 - mono0) / (tick1 - tick0); identity when tick1 == tick0.
  std::uint64_t clock_version; // 1536
  std::uint64_t tick0;         // 1544
  std::uint64_t mono0;         // 1552
  std::uint64_t tick1;         // 1560
  std::uint64_t mono1;         // 1568
  std::uint64_t pad24[3];
  std::uint64_t growth_refused; // 1600: extents the writer wanted but could not get (no room)
  std::uint64_t pad25[7];
  std::uint64_t reserved3[304];                   // 1664 .. 4096
  extent extents[k_section_count][k_max_extents]; // 4096: per-section extent directories
  std::uint64_t reserved4[32];                    // 7936 .. 8192
};
inline constexpr std::uint64_t k_flag_shutdown = 1; // shutdown() ran
inline constexpr std::uint64_t k_flag_snapshot = 2; // a copy saved while the writer ran (gmem save)
inline constexpr std::uint64_t k_flag_full = 4;     // the trace reached its limit: records lost
// Format 5: bit k_flag_observed_shift + observed_framework (trace_types.h): that framework's
// allocator was observed per allocation.
inline constexpr unsigned k_flag_observed_shift = 3;

static_assert(sizeof(header) == k_header_bytes);
static_assert(offsetof(header, format_version) == 8);
static_assert(offsetof(header, pid) == 24);
static_assert(offsetof(header, cmdline_string) == 64);
static_assert(offsetof(header, python_depth) == 84);
static_assert(offsetof(header, limit_bytes) == 88);
static_assert(offsetof(header, sections) == 128);
static_assert(offsetof(header, stat_names) == 640);
static_assert(offsetof(header, event_head) == 1024);
static_assert(offsetof(header, live_count) == 1088);
static_assert(offsetof(header, segment_count) == 1152);
static_assert(offsetof(header, stack_count) == 1216);
static_assert(offsetof(header, string_count) == 1280);
static_assert(offsetof(header, module_count) == 1344);
static_assert(offsetof(header, sample_head) == 1408);
static_assert(offsetof(header, heartbeat_realtime_ns) == 1472);
static_assert(offsetof(header, exit_live_count) == 1496);
static_assert(offsetof(header, clock_version) == 1536);
static_assert(offsetof(header, growth_refused) == 1600);
static_assert(offsetof(header, extents) == 4096);

// Ring chunks (section_kind::ring) when chunk 0 holds c0 records: chunk k >= 1 starts at ring
// index c0 * 2^(k-1) and holds as many records; chunk 0 starts at 0. A shift, not a division:
// writers look a chunk up at every event (c0 is a power of two; readers check that first).
constexpr std::uint32_t ring_chunk_of(std::uint64_t index, std::uint64_t c0) {
  return static_cast<std::uint32_t>(std::bit_width(index >> (std::countr_zero(c0) & 63)));
}
constexpr std::uint64_t ring_chunk_start(std::uint32_t k, std::uint64_t c0) {
  return k == 0 ? 0 : c0 << (k - 1);
}
constexpr std::uint64_t ring_chunk_records(std::uint32_t k, std::uint64_t c0) {
  return k == 0 ? c0 : c0 << (k - 1);
}
// Chunks of a ring of `capacity` records (both powers of two, c0 <= capacity).
constexpr std::uint32_t ring_chunk_count(std::uint64_t capacity, std::uint64_t c0) {
  return ring_chunk_of(capacity - 1, c0) + 1;
}
static_assert(ring_chunk_of(0, 4) == 0 && ring_chunk_of(3, 4) == 0 && ring_chunk_of(4, 4) == 1 &&
              ring_chunk_of(7, 4) == 1 && ring_chunk_of(8, 4) == 2 && ring_chunk_of(15, 4) == 2 &&
              ring_chunk_of(16, 4) == 3);
static_assert(ring_chunk_count(64, 64) == 1 && ring_chunk_count(1024, 64) == 5);

// Shards (section_kind::shards): which shard's table holds `address`. A multiplier other than
// hash_index()'s, so the shard says nothing about the slot inside the shard; the hash's top 32
// bits scaled to [0, shards) by a multiply, not a division (a 64-bit divide costs the writer
// ~20 cycles per live-table update). Readers do not depend on it.
constexpr std::uint32_t shard_of(std::uint64_t address, std::uint32_t shards) {
  return static_cast<std::uint32_t>(((address * 0xC2B2AE3D27D4EB4Full) >> 32) * shards >> 32);
}
static_assert(shard_of(0, 8) == 0 && shard_of(~0ull, 1) == 0);

// ---- records (word indexes) ----

// Event record, 8 words. w0 state: 2*seq when complete, 2*seq-1 while being written, 0 never.
namespace event_word {
inline constexpr unsigned state = 0, tick = 1, address = 2, size = 3, size2 = 4, stream = 5,
                          thread_ref = 6, // thread (low 32) | stack id or string id (high 32)
    device_type = 7; // device int32 (low 32) | type (bits 32..39) | kind (40..47)
inline constexpr unsigned count = 8;
} // namespace event_word

// Event lane descriptor (format 4), 64 words: the events section's extent holds an array of
// them. A lane is a ring of event records (chunks as in section_kind::ring) whose chunk
// directory is inside the descriptor. Lane 0 is shared (flags k_shared: records claimed as in
// a shared ring, so a claimed seq may still be being written); every other lane is written by
// one thread at a time, which publishes `head` after each record.
namespace lane_word {
inline constexpr unsigned head = 0, // seq of the last record (shared: the last claimed)
    dropped = 1,                    // records not written (no room, or a slot still busy)
    capacity = 2,                   // records the lane holds now (a power of two; 0 = unused)
    flags = 3,                      // k_shared
    // Version 5 (0 from older writers): gmem's own host time observing a framework's
    // allocations and frees on this lane's threads (tensor kind), stacks included, in time
    // stamp ticks (convert with the header's clock calibration). Written like the events.
    observed_allocs = 4, observed_alloc_ticks = 5, observed_frees = 6, observed_free_ticks = 7,
                          dir = 8; // k_max_extents extents {offset, records}, 2 words each
inline constexpr unsigned count = 64;
inline constexpr std::uint64_t k_shared = 1;
inline constexpr std::uint32_t k_max_lanes = 4096;
} // namespace lane_word
static_assert(lane_word::dir + 2 * k_max_extents <= lane_word::count);

// Live record (live allocations and live segments), 8 words.
namespace live_word {
inline constexpr unsigned
    key = 0,     // writer's probe key: 0 empty, 1 tombstone, else address (readers ignore it)
    version = 1, // low 32: seqlock counter (odd while writing); device int16 (32..47); kind
                 // (48..55); bit 56: held (freed after the program's code ended, kept)
    address = 2, // published address; 0 = slot not live
    requested = 3, rounded = 4, stream = 5, tick = 6,
    thread_stack = 7; // thread (low 32) | stack id (high 32)
inline constexpr unsigned count = 8;
inline constexpr std::uint64_t k_empty = 0, k_tombstone = 1,
                               k_reserved = 2; // keys <= 2: not addresses
inline constexpr std::uint64_t k_held_bit = 1ull << 56;
} // namespace live_word

// Stat record (per-device counters and samples), 4 + stat_slots words.
// Counters: w0 is a seqlock counter (odd while writing; 0 = slot unused).
// Samples:  w0 is the ring state like events (2*seq complete, 2*seq-1 writing).
namespace stat_word {
inline constexpr unsigned state = 0, tick = 1,
                          device_reason = 2, // device int32 (low 32) | reason (32..39)
    seq = 3,                                 // samples: seq; counters: updates so far
    values = 4;
} // namespace stat_word
// Value slots for `stat_count` counters: whole record a multiple of 64 bytes.
constexpr std::uint32_t stat_slots_for(std::uint32_t stat_count) {
  return ((stat_count + stat_word::values + 7) / 8) * 8 - stat_word::values;
}

// Stack and string slots, 2 words. w0 hash (0 = empty). w1: position of the first element in
// the trace (low 32; byte offset / element size: words for stacks, bytes for strings; inside
// one chunk of the section's arena) | length (32..55; ips or bytes) | status (56..63: 0 being
// written, 1 ready, 2 failed: no room).
namespace slot_word {
inline constexpr unsigned hash = 0, ref = 1;
inline constexpr unsigned count = 2;
inline constexpr std::uint64_t k_writing = 0, k_ready = 1, k_failed = 2;
constexpr std::uint64_t pack(std::uint64_t offset, std::uint64_t length, std::uint64_t status) {
  return (offset & 0xffffffffu) | ((length & 0xffffffu) << 32) | (status << 56);
}
} // namespace slot_word
inline constexpr std::uint32_t k_max_stack_depth = 256;

// Python frames in stack records (format 3). A stack record is the native return addresses,
// innermost first, then tagged words: no user-space address has a nonzero top byte (x86-64
// and AArch64 addresses fit in 57 bits), so a word whose top byte is a tag is not an ip.
//   frame: tag 0xA5 | line (32..55) | string id (low 32) of "file\0function"; innermost first
//   note:  tag 0xA6 | what (low 32): no_gil = an interpreter was there but the allocating
//          thread ran no Python code (no thread state or no frame; the name is format 3's);
//          finalizing = it was shutting down or not started
namespace python_word {
inline constexpr unsigned k_tag_shift = 56;
inline constexpr std::uint64_t k_frame_tag = 0xA5, k_note_tag = 0xA6;
inline constexpr std::uint32_t k_max_line = 0xffffff;
inline constexpr std::uint64_t k_note_no_gil = 1, k_note_finalizing = 2;
// The frames after this note are lent: another thread's, which waited in backward() while this
// thread (an engine's worker) did its work; bits 32-55 count the threads waiting then (the
// frames are the latest one's). profiler/recorder/waiting_frames.h.
inline constexpr std::uint64_t k_note_lent_backward = 3;
inline constexpr std::uint32_t k_max_waiting = 0xffffff;
constexpr std::uint64_t tag_of(std::uint64_t w) {
  return w >> k_tag_shift;
}
constexpr std::uint64_t frame(std::uint32_t location, std::uint32_t line) {
  return (k_frame_tag << k_tag_shift) |
         (std::uint64_t{line < k_max_line ? line : k_max_line} << 32) | location;
}
constexpr std::uint64_t note(std::uint64_t what) {
  return (k_note_tag << k_tag_shift) | what;
}
constexpr std::uint64_t lent_note(std::uint32_t waiting) {
  return note(k_note_lent_backward |
              (std::uint64_t{waiting < k_max_waiting ? waiting : k_max_waiting} << 32));
}
constexpr std::uint32_t location_of(std::uint64_t w) {
  return static_cast<std::uint32_t>(w);
}
constexpr std::uint32_t line_of(std::uint64_t w) {
  return static_cast<std::uint32_t>((w >> 32) & 0xffffff);
}
} // namespace python_word
static_assert(python_word::frame(7, 42) == 0xA500002A00000007ull);
static_assert(python_word::line_of(python_word::frame(7, 0x2000000)) == 0xffffff);
static_assert(python_word::tag_of(python_word::note(python_word::k_note_no_gil)) == 0xA6);
static_assert(python_word::lent_note(2) == 0xA600000200000003ull);
inline constexpr std::uint32_t k_max_python_depth = 128;
inline constexpr std::uint32_t k_max_string_bytes = 65536;

// Module record, 8 words. w0 seqlock counter (odd while writing, 0 unused).
namespace module_word {
inline constexpr unsigned version = 0, load_bias = 1, start = 2, size = 3,
                          path_info = 4, // path string id (low 32) | build id length (32..39) |
                                         // loaded (bit 40)
    build_id = 5;                        // words 5..7: up to 24 bytes of build id
inline constexpr unsigned count = 8;
inline constexpr unsigned k_max_build_id = 24;
} // namespace module_word

// ---- word access: every shared word goes through these ----
inline std::uint64_t load_word(const std::uint64_t* p) noexcept {
  return __atomic_load_n(p, __ATOMIC_RELAXED);
}
inline std::uint64_t load_acquire(const std::uint64_t* p) noexcept {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
inline void store_word(std::uint64_t* p, std::uint64_t v) noexcept {
  __atomic_store_n(p, v, __ATOMIC_RELAXED);
}
inline void store_release(std::uint64_t* p, std::uint64_t v) noexcept {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}
inline std::uint64_t fetch_add(std::uint64_t* p, std::uint64_t v) noexcept {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
inline bool compare_exchange(std::uint64_t* p, std::uint64_t& expected,
                             std::uint64_t desired) noexcept {
  return __atomic_compare_exchange_n(p, &expected, desired, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE);
}

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Fibonacci hashing of a 64-bit key into [0, 2^bits).
constexpr std::uint64_t hash_index(std::uint64_t key, unsigned bits) {
  return bits == 0 ? 0 : (key * 0x9E3779B97F4A7C15ull) >> (64 - bits);
}

} // namespace gmem::trace::layout
