// A long-running "service" for the exporter tests: it reaches the driver as the CUDA runtime
// does (dlopen libcuda.so.1 + dlsym), so under `gmem run` with the fake driver it needs no GPU.
//   steady_service leak STOPFILE    holds 8 MiB in hold_model(), and every 100 ms leaks
//                                   64 KiB in leak_slowly() (never freed)
//   steady_service stable STOPFILE  holds 4 MiB in hold_stable(), and every 100 ms frees that
//                                   buffer and allocates a new one of the same size there
//   steady_service later STOPFILE   holds 8 MiB in hold_model(), and leaks like `leak` only
//                                   once STOPFILE.go exists (call sites new to a later scrape)
// Prints "ready <pid>" once the first allocations are made; runs until STOPFILE exists or 60 s
// have passed, then frees nothing and exits 0.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using alloc_fn = CUresult (*)(CUdeviceptr*, size_t);
using free_fn = CUresult (*)(CUdeviceptr);
alloc_fn g_alloc = nullptr;
free_fn g_free = nullptr;
std::vector<CUdeviceptr> g_kept;

template <typename F> F sym(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    std::fprintf(stderr, "steady_service: %s not found in libcuda.so.1\n", name);
    _exit(2);
  }
  return reinterpret_cast<F>(p);
}

CUdeviceptr must_alloc(size_t bytes) {
  CUdeviceptr p = 0;
  if (g_alloc(&p, bytes) != CUDA_SUCCESS) {
    std::fprintf(stderr, "steady_service: cuMemAlloc(%zu) failed\n", bytes);
    _exit(3);
  }
  return p;
}

__attribute__((noinline)) void hold_model() {
  g_kept.push_back(must_alloc(8u << 20));
}
__attribute__((noinline)) void leak_slowly() {
  g_kept.push_back(must_alloc(64u << 10));
}
__attribute__((noinline)) CUdeviceptr hold_stable() {
  return must_alloc(4u << 20);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[1], "leak") != 0 && std::strcmp(argv[1], "stable") != 0 &&
                    std::strcmp(argv[1], "later") != 0)) {
    std::fprintf(stderr, "usage: steady_service leak|stable|later STOPFILE\n");
    return 2;
  }
  const bool later = std::strcmp(argv[1], "later") == 0;
  const bool leak = later || std::strcmp(argv[1], "leak") == 0;
  const std::string go = std::string(argv[2]) + ".go";
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "steady_service: %s\n", dlerror());
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
    std::fprintf(stderr, "steady_service: no CUDA context\n");
    return 2;
  }
  CUdeviceptr stable = 0;
  if (leak)
    hold_model();
  else
    stable = hold_stable();
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  for (int tick = 0; tick < 600 && access(argv[2], F_OK) != 0; ++tick) {
    usleep(100'000);
    if (leak) {
      if (!later || access(go.c_str(), F_OK) == 0) leak_slowly();
    } else {
      g_free(stable);
      stable = hold_stable();
    }
  }
  return 0;
}
