/* gmem client API: ask the gmem pool (or, without it, the CUDA driver) how much GPU memory a
 * program may use, drop cached memory, set a limit, and put labelled markers into the trace.
 *
 * C ABI, usable from C, C++ and Python (ctypes). Two libraries export these names:
 * - libgmem.so, the preloaded shim: answers from its pool and its trace;
 * - libgmem_client.so, linked by the program: forwards every call to libgmem.so when that is
 *   preloaded, and otherwise answers from the driver (libcuda.so.1, loaded at run time; the
 *   program needs no CUDA at build time). gmem_available() says which one answers.
 *
 * Every function is thread-safe, never throws, and reports failures with a gmem_status.
 * Devices are CUdevice ordinals; -1 means "the device of the calling thread's current
 * context, or device 0 when there is none". See docs/api.md for the full contract. */
#ifndef GMEM_GMEM_H
#define GMEM_GMEM_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define GMEM_API __attribute__((visibility("default")))
#else
#define GMEM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum gmem_status {
  GMEM_OK = 0,
  GMEM_ERROR_INVALID_ARGUMENT = 1, /* null pointer, bad struct_size, unknown device ordinal */
  GMEM_ERROR_NO_DRIVER = 2,        /* libcuda.so.1 missing or cuInit failed: no GPU answer */
  GMEM_ERROR_NO_SHIM = 3,          /* needs libgmem.so preloaded; nothing was done */
  GMEM_ERROR_DRIVER = 4,           /* a driver call failed (the report says which) */
  GMEM_ERROR_TRUNCATED = 5,        /* output did not fit; it was cut and NUL-terminated */
  GMEM_ERROR_INTERNAL = 6          /* a bug in gmem; nothing was changed */
} gmem_status;

/* "GMEM_OK", "GMEM_ERROR_NO_SHIM", ...; "GMEM_ERROR_UNKNOWN" for other values. Static. */
GMEM_API const char* gmem_status_name(gmem_status status);

/* 1 when libgmem.so is preloaded and its pool answers, 0 when answers come from the driver. */
GMEM_API int gmem_available(void);

/* The pool's counters (one per entry of GMEM_POOL_STATS in pool/stats.h, same names, same
 * order), all in bytes or counts. GMEM_STATS_FIELDS lists them for C and for bindings. */
/* clang-format off */
#define GMEM_STATS_FIELDS(X) \
  X(live_bytes) \
  X(live_requested_bytes) \
  X(live_blocks) \
  X(reserved_bytes) \
  X(peak_live_bytes) \
  X(peak_reserved_bytes) \
  X(total_allocs) \
  X(total_frees) \
  X(total_alloc_bytes) \
  X(cache_hits) \
  X(upstream_allocs) \
  X(segments) \
  X(segment_maps) \
  X(segment_unmaps) \
  X(pending_bytes) \
  X(pending_blocks) \
  X(fences) \
  X(ooms) \
  X(free_bytes) \
  X(largest_free_block) \
  X(trims) \
  X(trimmed_bytes) \
  X(limit_bytes) \
  X(stream_free_bytes) \
  X(invalid_frees) \
  X(barriers) \
  X(stitches) \
  X(stitched_ranges) \
  X(stitched_bytes) \
  X(kept_ranges) \
  X(kept_range_bytes) \
  X(kept_reuses) \
  X(stitch_ns) \
  X(stitch_budget_grows)
/* clang-format on */

#define GMEM_STATS_VERSION 4
#define GMEM_STATS_FROM_POOL 1u   /* flags: counters come from libgmem.so's pool */
#define GMEM_STATS_FROM_DRIVER 2u /* flags: device_* figures come from cuMemGetInfo */

/* Growth rule: fields are only ever appended. The caller sets struct_size to
 * sizeof(gmem_stats_t) of the header it was compiled with; the library fills at most that
 * many bytes and sets struct_size to the number it filled and version to its own
 * GMEM_STATS_VERSION, so old callers keep working with new libraries and vice versa. */
typedef struct gmem_stats_t {
  uint32_t struct_size;        /* in: caller's sizeof(gmem_stats_t); out: bytes filled */
  uint32_t version;            /* out: GMEM_STATS_VERSION of the library that answered */
  int32_t device;              /* out: the device ordinal answered for (-1 resolved) */
  uint32_t flags;              /* out: GMEM_STATS_FROM_POOL | GMEM_STATS_FROM_DRIVER */
  uint64_t device_total_bytes; /* cuDeviceTotalMem; 0 when unknown */
  uint64_t device_free_bytes;  /* driver's free memory, NOT counting the pool's cache */
  uint64_t allocatable_bytes;  /* what gmem_allocatable_bytes() answers */
#define GMEM_STATS_MEMBER_(name) uint64_t name;
  GMEM_STATS_FIELDS(GMEM_STATS_MEMBER_)
#undef GMEM_STATS_MEMBER_
} gmem_stats_t;

/* Fills *out for `device`. Without the shim only device_*, allocatable_bytes and limit_bytes
 * (the advisory limit, see gmem_set_limit) are set; the pool counters are 0. */
GMEM_API gmem_status gmem_stats(int device, gmem_stats_t* out);

/* Sets peak_live_bytes and peak_reserved_bytes of every pool to their current values.
 * GMEM_ERROR_NO_SHIM without the shim. */
GMEM_API gmem_status gmem_reset_peak(void);

/* Makes pending blocks reusable (one device synchronization) and returns every free cached
 * segment of every pool to the driver. GMEM_OK without the shim (there is no cache). */
GMEM_API gmem_status gmem_empty_cache(void);

/* Limits the pool of `device` (-1: every device) to `bytes` of reserved memory; 0 removes the
 * limit. Without the shim the limit is advisory: only gmem_allocatable_bytes,
 * gmem_can_allocate and the chunking helpers honour it. */
GMEM_API gmem_status gmem_set_limit(uint64_t bytes, int device);

/* Bytes this process could still obtain on `device`: the driver's free memory plus the
 * pool's cached free and pending memory, capped by the limit. A single allocation may also
 * be bounded by fragmentation (largest_free_block) and by the driver's own granularity. */
GMEM_API gmem_status gmem_allocatable_bytes(int device, uint64_t* out);

/* 1 when gmem_allocatable_bytes(device) >= bytes, 0 when not or when it cannot be known. */
GMEM_API int gmem_can_allocate(uint64_t bytes, int device);

/* Records a labelled marker (with a stats snapshot) in the trace; `gmem report` shows it on
 * the timeline. Labels longer than the trace's label field are cut. GMEM_ERROR_NO_SHIM
 * without the shim. */
GMEM_API gmem_status gmem_mark(const char* label);

/* Writes a human-readable report (device, totals, pool allocated/reserved/peak,
 * fragmentation, cache hit rate, recommendations with their thresholds) for every device
 * the process uses into buf, NUL-terminated. GMEM_ERROR_TRUNCATED when len was too small
 * (4 KiB is enough for one device). */
GMEM_API gmem_status gmem_memory_report(char* buf, size_t len);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GMEM_GMEM_H */
