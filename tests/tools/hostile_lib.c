/* Another user's library for the shared-host tests (tests/tools/shared_host_e2e_test.sh,
   tests/exporter/exporter_modules_test.sh): allocates 1 MiB through the driver and never
   frees it, so a leak report symbolizes a frame in it. */
#include <dlfcn.h>
#include <stddef.h>
typedef int (*init_fn)(unsigned);
typedef int (*retain_fn)(void**, int);
typedef int (*set_fn)(void*);
typedef int (*alloc_fn)(unsigned long long*, size_t);
__attribute__((noinline)) int evil_alloc(void) {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW);
  if (!cuda) return 2;
  void* ctx = 0;
  unsigned long long p = 0;
  if (((init_fn)dlsym(cuda, "cuInit"))(0) ||
      ((retain_fn)dlsym(cuda, "cuDevicePrimaryCtxRetain"))(&ctx, 0) ||
      ((set_fn)dlsym(cuda, "cuCtxSetCurrent"))(ctx))
    return 3;
  return ((alloc_fn)dlsym(cuda, "cuMemAlloc_v2"))(&p, 1 << 20) ? 4 : 0;
}
