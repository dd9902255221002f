/* Exercises the C API from plain C (so gmem.h stays valid C) and prints one "key=value" line
 * per fact; tests/api/api_e2e.sh runs it with and without libgmem.so and checks the lines.
 * Usage: api_probe [alloc_bytes [limit-first]]
 *   alloc_bytes: allocated through the driver (default 8 MiB)
 *   limit-first: gmem_set_limit(16 MiB) before any context or pool exists */
#include "gmem/gmem.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*cu_init_fn)(unsigned);
typedef int (*cu_retain_fn)(void**, int);
typedef int (*cu_set_fn)(void*);
typedef int (*cu_alloc_fn)(unsigned long long*, size_t);
typedef int (*cu_free_fn)(unsigned long long);

static void print_stats(const char* tag) {
  gmem_stats_t s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  gmem_status rc = gmem_stats(-1, &s);
  printf("%s.status=%s\n", tag, gmem_status_name(rc));
  if (rc != GMEM_OK) return;
  printf("%s.struct_size=%u\n%s.version=%u\n%s.flags=%u\n", tag, s.struct_size, tag, s.version, tag,
         s.flags);
  printf("%s.device_total_bytes=%llu\n%s.allocatable_bytes=%llu\n", tag,
         (unsigned long long)s.device_total_bytes, tag, (unsigned long long)s.allocatable_bytes);
  printf("%s.live_bytes=%llu\n%s.reserved_bytes=%llu\n%s.peak_live_bytes=%llu\n", tag,
         (unsigned long long)s.live_bytes, tag, (unsigned long long)s.reserved_bytes, tag,
         (unsigned long long)s.peak_live_bytes);
  printf("%s.limit_bytes=%llu\n", tag, (unsigned long long)s.limit_bytes);
}

int main(int argc, char** argv) {
  size_t alloc_bytes = argc > 1 ? (size_t)strtoull(argv[1], NULL, 10) : (size_t)8 << 20;
  char report[8192];
  gmem_stats_t header_only;
  uint64_t avail = 0;
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);

  if (argc > 2 && strcmp(argv[2], "limit-first") == 0)
    printf("early_limit.status=%s\n", gmem_status_name(gmem_set_limit(16u << 20, -1)));
  printf("available=%d\n", gmem_available());
  print_stats("start");

  /* An old caller that only knows the fixed header. */
  memset(&header_only, 0, sizeof header_only);
  header_only.struct_size = 16;
  printf("header_only.status=%s\n", gmem_status_name(gmem_stats(-1, &header_only)));
  printf("header_only.struct_size=%u\n", header_only.struct_size);
  printf("null.status=%s\n", gmem_status_name(gmem_stats(-1, NULL)));

  if (cuda != NULL) { /* one allocation through the driver: the shim pools it */
    cu_init_fn init = (cu_init_fn)dlsym(cuda, "cuInit");
    cu_retain_fn retain = (cu_retain_fn)dlsym(cuda, "cuDevicePrimaryCtxRetain");
    cu_set_fn set = (cu_set_fn)dlsym(cuda, "cuCtxSetCurrent");
    cu_alloc_fn alloc = (cu_alloc_fn)dlsym(cuda, "cuMemAlloc_v2");
    cu_free_fn release = (cu_free_fn)dlsym(cuda, "cuMemFree_v2");
    void* ctx = NULL;
    unsigned long long p = 0;
    if (init && retain && set && alloc && release && init(0) == 0 && retain(&ctx, 0) == 0 &&
        set(ctx) == 0 && alloc(&p, alloc_bytes) == 0) {
      print_stats("allocated");
      printf("mark.status=%s\n", gmem_status_name(gmem_mark("api_probe: after alloc")));
      release(p);
      print_stats("freed");
      printf("reset_peak.status=%s\n", gmem_status_name(gmem_reset_peak()));
      printf("empty_cache.status=%s\n", gmem_status_name(gmem_empty_cache()));
      print_stats("emptied");
    } else {
      printf("alloc.status=failed\n");
    }
  } else {
    printf("mark.status=%s\n", gmem_status_name(gmem_mark("api_probe: no driver")));
    printf("reset_peak.status=%s\n", gmem_status_name(gmem_reset_peak()));
    printf("empty_cache.status=%s\n", gmem_status_name(gmem_empty_cache()));
  }

  printf("set_limit.status=%s\n", gmem_status_name(gmem_set_limit(64u << 20, -1)));
  printf("allocatable.status=%s\n", gmem_status_name(gmem_allocatable_bytes(-1, &avail)));
  printf("allocatable_after_limit=%llu\n", (unsigned long long)avail);
  printf("can_allocate_1M=%d\n", gmem_can_allocate(1u << 20, -1));
  printf("can_allocate_1T=%d\n", gmem_can_allocate((uint64_t)1 << 40, -1));
  printf("set_limit_bad_device.status=%s\n", gmem_status_name(gmem_set_limit(1, -5)));
  printf("report_small.status=%s\n", gmem_status_name(gmem_memory_report(report, 16)));
  printf("report.status=%s\n", gmem_status_name(gmem_memory_report(report, sizeof report)));
  printf("---- report\n%s---- end\n", report);
  return 0;
}
