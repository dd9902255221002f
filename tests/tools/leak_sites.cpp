// A CUDA driver program with exactly three leak sites, for the gmem end-to-end tests. It
// reaches the driver as the CUDA runtime does (dlopen libcuda.so.1 + dlsym), so under `gmem run`
// every allocation goes through libgmem.so; against the fake driver it needs no GPU.
//   leak_lookup_table   12 x 3000 B      (36000 B)
//   leak_weights         5 x 2 MiB       (10 MiB)
//   leak_workspace       1 x 40 MiB
// Everything else it allocates is freed. Between phases it calls gmem_mark() (found with
// dlsym, so it runs without the shim too) to label the timeline. With --hold it prints "ready
// <pid>" after leaking and waits for stdin to close, so tests can look at a running process.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

using alloc_fn = CUresult (*)(CUdeviceptr*, size_t);
using free_fn = CUresult (*)(CUdeviceptr);
alloc_fn g_alloc = nullptr;
free_fn g_free = nullptr;
std::vector<CUdeviceptr> g_kept; // leaked on purpose

template <typename F> F sym(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    std::fprintf(stderr, "leak_sites: %s not found in libcuda.so.1\n", name);
    _exit(2);
  }
  return reinterpret_cast<F>(p);
}

CUdeviceptr must_alloc(size_t bytes) {
  CUdeviceptr p = 0;
  if (g_alloc(&p, bytes) != CUDA_SUCCESS) {
    std::fprintf(stderr, "leak_sites: cuMemAlloc(%zu) failed\n", bytes);
    _exit(3);
  }
  return p;
}

__attribute__((noinline)) void leak_lookup_table() {
  for (int i = 0; i < 12; ++i)
    g_kept.push_back(must_alloc(3000));
}

__attribute__((noinline)) void leak_weights() {
  for (int i = 0; i < 5; ++i)
    g_kept.push_back(must_alloc(2u << 20));
}

__attribute__((noinline)) void leak_workspace() {
  g_kept.push_back(must_alloc(40u << 20));
}

// Freed work: these must not show up as leaks.
__attribute__((noinline)) void churn() {
  for (int round = 0; round < 20; ++round) {
    CUdeviceptr a = must_alloc(static_cast<size_t>(1 + round) << 16);
    CUdeviceptr b = must_alloc(512);
    CUdeviceptr c = must_alloc(3u << 20);
    g_free(b);
    g_free(a);
    g_free(c);
  }
}

void mark(const char* label) {
  using mark_fn = int (*)(const char*);
  if (auto f = reinterpret_cast<mark_fn>(dlsym(RTLD_DEFAULT, "gmem_mark"))) f(label);
}

} // namespace

int main(int argc, char** argv) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "leak_sites: %s\n", dlerror());
    return 2;
  }
  auto init = sym<CUresult (*)(unsigned)>(lib, "cuInit");
  auto retain = sym<CUresult (*)(CUcontext*, CUdevice)>(lib, "cuDevicePrimaryCtxRetain");
  auto set_current = sym<CUresult (*)(CUcontext)>(lib, "cuCtxSetCurrent");
  g_alloc = sym<alloc_fn>(lib, "cuMemAlloc_v2");
  g_free = sym<free_fn>(lib, "cuMemFree_v2");
  CUcontext ctx = nullptr;
  if (init(0) != CUDA_SUCCESS || retain(&ctx, 0) != CUDA_SUCCESS ||
      set_current(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "leak_sites: no CUDA context\n");
    return 2;
  }
  mark("start");
  churn();
  leak_lookup_table();
  mark("lookup table");
  churn();
  leak_weights();
  mark("weights");
  leak_workspace();
  churn();
  mark("done");
  if (argc > 1 && std::strcmp(argv[1], "--hold") == 0) {
    std::printf("ready %d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    char buf[64];
    while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
    }
  }
  std::printf("leak_sites: done, %zu allocations kept\n", g_kept.size());
  return 0;
}
