// Every GMEM_* environment option, in one table. The shim reads them once at start-up
// (options::from_env); `gmem run` maps its command-line flags onto the same variables; the
// README's option table is checked against this list by tests/interpose/options_test.cpp.
//
// A row: X(field, "GMEM_NAME", type, category, "default as written", "what an empty default
// means", "help"). Types:
//   flag          0/1 (also yes/no, on/off, true/false)          -> bool
//   count         a non-negative integer                          -> std::uint64_t
//   size          bytes with K/M/G suffixes, empty = none         -> std::uint64_t (0 = none)
//   size_percent  a size or a percentage of device memory          -> size_or_percent (+ _set)
//   text          any string                                       -> std::string
//   duration      "250ms", "30s", ...; empty = none                -> std::uint64_t ns
// Categories (README's table and gmem-options(7) list the first apart from the others):
//   tune       what a user sets for a workload: limits, caching, sizes, what the trace keeps
//   fallback   switches back to a simpler or stricter path: the shim off, no arena and the
//              fallback pool's segment sizes, the driver's synchronization (GMEM_STRICT)
//   diagnosis  output and slower paths for finding a problem
//   testing    unsafe settings for gmem's own tests
// A value that does not parse never aborts: it prints one line, once per process
//   gmem: warning: GMEM_LIMIT='12X' is not a size; using no limit
// and the default is used. So does a value that parses but cannot work (a limit below 1 MiB,
// tables too large for /dev/shm and the readers; warm-up beyond the device is checked when
// the device's pool is created).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/units.h"

// Rows for the shim and the pool. Defaults of the pool's segment sizes
// are the pool's own starting points (pool/pool.h documents them).
#define GMEM_SHIM_OPTIONS(X)                                                                       \
  X(enable, "GMEM_ENABLE", flag, fallback, "1", "",                                                \
    "0 = the shim passes every call straight to the driver")                                       \
  X(limit, "GMEM_LIMIT", size_percent, tune, "", "no limit",                                       \
    "most device memory a pool may reserve (bytes, or % of the device); cuMemGetInfo reports it")  \
  X(max_cached, "GMEM_MAX_CACHED", size, tune, "", "no cap",                                       \
    "most free bytes a pool keeps cached; free segments beyond it go back to the driver")          \
  X(small_segment, "GMEM_SMALL_SEGMENT", size, tune, "", "pool default (2M)",                      \
    "segment size for small requests")                                                             \
  X(large_segment, "GMEM_LARGE_SEGMENT", size, fallback, "", "pool default (40M)",                 \
    "fallback only (no arena: GMEM_ARENA=0 or no VMM): smallest segment for large requests "       \
    "(grows to reserved/8, at most 256M)")                                                         \
  X(small_max, "GMEM_SMALL_MAX", size, tune, "", "pool default (1M)",                              \
    "largest request packed into small segments")                                                  \
  X(oversize, "GMEM_OVERSIZE", size, fallback, "",                                                 \
    "pool default (20M, or reserved/512 if larger)",                                               \
    "fallback only (no arena: GMEM_ARENA=0 or no VMM): requests above this get a segment of "      \
    "their own")                                                                                   \
  X(warmup, "GMEM_WARMUP", size, tune, "", "none",                                                 \
    "device bytes each pool reserves when it is created")                                          \
  X(host, "GMEM_HOST", flag, tune, "1", "",                                                        \
    "1 = pool pinned host memory (cuMemHostAlloc, cuMemAllocHost)")                                \
  X(barriers, "GMEM_BARRIERS", flag, diagnosis, "1", "",                                           \
    "1 = a pool fence is a device-side barrier (GMEM_CONTEXT_BARRIER) instead of a "               \
    "host-blocking cuCtxSynchronize; 0 = always synchronize (diagnosis only: slower)")             \
  X(context_barrier, "GMEM_CONTEXT_BARRIER", flag, diagnosis, "1", "",                             \
    "1 = a device-side barrier is one context barrier (cuCtxRecordEvent + cuCtxWaitEvent, "        \
    "drivers of CUDA 12.5 and later) while no graph capture is open; 0 = events on every "         \
    "non-blocking stream instead (diagnosis only: slower)")                                        \
  X(fence_marks, "GMEM_FENCE_MARKS", flag, diagnosis, "1", "",                                     \
    "1 = while threads contend for fences, a pool first asks whether a context event it "          \
    "recorded earlier (cuCtxRecordEvent alone) has completed and, if so, reuses the blocks "       \
    "freed before it with no barrier; 0 = every fence is a barrier (diagnosis only)")              \
  X(vmm, "GMEM_VMM", flag, tune, "0", "",                                                          \
    "1 = segments outside the arena (small requests; every request with GMEM_ARENA=0) are "        \
    "virtual-memory mappings, given back without waiting for the device; 0 = "                     \
    "cuMemAlloc/cuMemFree "                                                                        \
    "segments")                                                                                    \
  X(arena, "GMEM_ARENA", flag, fallback, "1", "",                                                  \
    "1 = device requests above GMEM_SMALL_MAX come from one virtual-memory arena that grows "      \
    "where it ends, so free space merges across growths (needs VMM support, else ignored); "       \
    "0 = segments of their own")                                                                   \
  X(arena_page_mb, "GMEM_ARENA_PAGE_MB", count, tune, "16", "",                                    \
    "MiB per arena page, the unit the arena maps and gives back (a power of two, at least 2)")     \
  X(stitch, "GMEM_STITCH", flag, tune, "0", "",                                                    \
    "1 = a large request that no free arena range fits, while the arena's wholly free pages add "  \
    "up to it, maps those pages into a new address range instead of growing the arena; arena "     \
    "pages are then 2 MiB unless GMEM_ARENA_PAGE_MB is set (only whole free pages can be "         \
    "stitched); 0 = the arena grows")                                                              \
  X(stitch_keep, "GMEM_STITCH_KEEP", count, tune, "256", "",                                       \
    "with GMEM_STITCH: freed stitched ranges kept mapped for reuse (no page mapped when one "      \
    "serves again), the least recently used given back beyond this many; 0 = none kept")           \
  X(stitch_time_pct, "GMEM_STITCH_TIME_PCT", count, tune, "1", "",                                 \
    "with GMEM_STITCH: percent of the run's time (counted as at least 10 s) that making and "      \
    "giving back stitched ranges may take; past it the arena grows instead; 100 = no budget")      \
  X(strict, "GMEM_STRICT", flag, fallback, "0", "",                                                \
    "1 = CUDA's synchronization exactly: a stream-less free (cuMemFree, cuMemFreeHost) returns "   \
    "once the device has finished the work issued before it, and an allocation orders the "        \
    "streams like the driver's does (the pool still serves both); 0 = frees do not wait")          \
  X(reuse_safety, "GMEM_REUSE_SAFETY", flag, testing, "1", "",                                     \
    "TESTING ONLY: 0 lets a freed block be reused while earlier GPU work may still use it")        \
  X(verbose, "GMEM_VERBOSE", count, diagnosis, "0", "",                                            \
    "1 = print each pool's counters, its lock's contention, its host time in fences and segment "  \
    "calls, its event and barrier driver calls, the substitution counts, gmem's own time "         \
    "observing a framework's tensors and how the trace's file grew at exit")                       \
  X(oom_report, "GMEM_OOM_REPORT", flag, diagnosis, "1", "",                                       \
    "1 = when a pooled allocation fails with out of memory, print to stderr the request, device "  \
    "free and limit, the pool's state and the 5 call sites holding the most (the first failure, "  \
    "then at most one report a minute); 0 = no report")                                            \
  X(frameworks, "GMEM_FRAMEWORKS", text, tune, "observe", "",                                      \
    "observe = PyTorch and CuPy keep their caching allocators (CUDA graphs work) and each tensor " \
    "is traced with its Python line through their allocation hooks; JAX, whose arena cannot be "   \
    "observed, gets XLA_PYTHON_CLIENT_ALLOCATOR=platform and XLA_PYTHON_CLIENT_PREALLOCATE=false " \
    "where unset, so gmem's pool serves each array; pool = gmem run and pytest --gmem also set "   \
    "PYTORCH_NO_CUDA_MEMORY_CACHING=1 where unset (PyTorch's CUDA graphs then fail, as "           \
    "natively); off = set, observe and say nothing")

// Rows for the trace recorder.
#define GMEM_TRACE_OPTIONS(X)                                                                      \
  X(trace_enable, "GMEM_TRACE", flag, tune, "1", "", "0 = record no trace (the pool still works)") \
  X(trace_live, "GMEM_TRACE_LIVE", count, tune, "1048576", "",                                     \
    "most live allocations the trace's table grows to hold (it starts small and grows with "       \
    "them: 128-192 bytes of /dev/shm each)")                                                       \
  X(trace_events, "GMEM_TRACE_EVENTS", count, tune, "524288", "",                                  \
    "events the trace keeps before its lanes wrap (64 bytes each, allocated as they fill), "       \
    "shared by the lanes of the threads that record (one busy thread may hold them all); "         \
    "threads beyond 63 recording at once share a lane of a further eighth")                        \
  X(stack_depth, "GMEM_STACK_DEPTH", count, tune, "16", "",                                        \
    "frames recorded per allocation call stack; 0 = no stacks")                                    \
  X(python_depth, "GMEM_PYTHON_DEPTH", count, tune, "16", "",                                      \
    "Python frames (file, function, line) recorded per stack when the allocating thread runs "     \
    "Python code of CPython 3.10-3.13 (GIL held or released); 0 = none")                           \
  X(trace_save, "GMEM_TRACE_SAVE", text, tune, "", "none",                                         \
    "file the trace is copied to at exit (%p = pid)")                                              \
  X(sample_ms, "GMEM_SAMPLE_MS", count, tune, "100", "",                                           \
    "milliseconds between counter samples (timeline, heartbeat)")                                  \
  X(trace_max, "GMEM_TRACE_MAX", size_percent, tune, "25%", "",                                    \
    "most /dev/shm one trace grows to: bytes, or a share of the free space (the trace's own "      \
    "bytes counted as free) checked at each growth; past it the trace counts what it drops")       \
  X(trace_keep, "GMEM_TRACE_KEEP", text, tune, "all", "",                                          \
    "what a process that exits leaves in /dev/shm: all = its trace; outstanding = its trace only " \
    "if allocations were still live at exit; none = nothing (a crash always leaves it)")           \
  X(keep_max, "GMEM_TRACE_KEEP_MAX", size_percent, tune, "10%", "",                                \
    "most /dev/shm that traces of exited processes hold together (bytes, or % of /dev/shm); "      \
    "the oldest are removed first")                                                                \
  X(keep_free, "GMEM_TRACE_KEEP_FREE", size_percent, tune, "15%", "",                              \
    "/dev/shm space kept free: traces of exited processes are removed, oldest first, while less "  \
    "is free (bytes, or % of /dev/shm)")                                                           \
  X(keep_age, "GMEM_TRACE_KEEP_AGE", duration, tune, "3d", "",                                     \
    "traces of processes that exited longer ago than this are removed")

#define GMEM_OPTIONS(X) GMEM_SHIM_OPTIONS(X) GMEM_TRACE_OPTIONS(X)

namespace gmem {

enum class option_type { flag, count, size, size_percent, text, duration };
enum class option_category { tune, fallback, diagnosis, testing };

namespace option_value {
using flag = bool;
using count = std::uint64_t;
using size = std::uint64_t;
using size_percent = gmem::size_or_percent;
using text = std::string;
using duration = std::uint64_t;
} // namespace option_value

struct option_row {
  const char* field;
  const char* env_name;
  option_type type;
  option_category category;
  const char* default_text;
  const char* empty_means; // shown instead of an empty default ("no limit")
  const char* help;
};

// The table itself, in declaration order, for --help, README checks and `gmem run`.
const option_row* option_rows(std::size_t* count);

struct options {
#define GMEM_OPTION_FIELD(field, env, type, category, def, empty, help)                            \
  option_value::type field{};                                                                      \
  bool field##_set = false; /* the variable was present and parsed */
  GMEM_OPTIONS(GMEM_OPTION_FIELD)
#undef GMEM_OPTION_FIELD

  // Every row at its default.
  static options defaults();
  // Reads every row through `lookup` (nullptr = unset). Warnings go to `warn`, one line each
  // without the trailing newline.
  static options parse(const std::function<const char*(const char*)>& lookup,
                       const std::function<void(const std::string&)>& warn);
  // parse() over env_value(), warnings to stderr through warn_once(). In a process of secure
  // execution it says once which GMEM_* variables it ignored.
  static options from_env();
  // getenv(name), except in a process of secure execution (getauxval(AT_SECURE): setuid,
  // setgid or file capabilities, where the environment comes from a less privileged user, and
  // gmem was loaded through /etc/ld.so.preload or a library dependency): nullptr for every
  // GMEM_* name. Every option then has its default: GMEM_TRACE_SAVE would write a file
  // wherever the caller names with the program's privileges, GMEM_REUSE_SAFETY=0 would hand
  // out memory still in use, the GMEM_TRACE_KEEP_* rows would remove the owner's traces, the
  // sizes would fill /dev/shm, GMEM_VERBOSE and GMEM_OOM_REPORT would print the program's call
  // sites to the caller; none is needed for the program to run.
  static const char* env_value(const char* name);
  // The secure-execution test env_value() uses; tests override it (nullptr: getauxval).
  static void set_secure_for_testing(const bool* secure);
  // Prints `line` on stderr unless this process printed it already: the shim and the recorder
  // both read the environment, and a bad value is worth one line, not one per reader.
  static void warn_once(const std::string& line);
  // Bounds of values that parse but cannot work (refused with a warning, default used).
  static constexpr std::uint64_t k_min_limit = std::uint64_t{1} << 20; // GMEM_LIMIT bytes
  static constexpr std::uint64_t k_max_trace_live = std::uint64_t{1} << 29;
  static constexpr std::uint64_t k_max_trace_events = std::uint64_t{1} << 30;
};

} // namespace gmem
