// A program that allocates as a PyTorch program does, for tests/tools/frameworks_e2e_test.sh:
// through the stand-ins of tests/tools/fake_framework_libs.cpp (found in fw/ beside it) it
// grows PyTorch's cache by four segments (20, 20, 1 and 1 MiB: 42 MiB), pins 64 KiB of host
// memory through the pinned host cache and creates a cuBLAS handle (4 MiB workspace), all kept
// to exit as PyTorch keeps them; and it leaks two 3 MiB buffers of its own from
// leak_user_buffers(). Everything else is freed.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {

std::string g_dir; // this program's directory

void* library(const char* name) {
  const std::string path = g_dir + "/fw/" + name;
  void* lib = dlopen(path.c_str(), RTLD_NOW);
  if (lib == nullptr) {
    std::fprintf(stderr, "framework_sites: %s\n", dlerror());
    _exit(2);
  }
  return lib;
}

template <typename F> F sym(void* lib, const char* name) {
  void* p = dlsym(lib, name);
  if (p == nullptr) {
    std::fprintf(stderr, "framework_sites: no %s\n", name);
    _exit(2);
  }
  return reinterpret_cast<F>(p);
}

using alloc_fn = CUresult (*)(CUdeviceptr*, std::size_t);
using free_fn = CUresult (*)(CUdeviceptr);
alloc_fn g_alloc = nullptr;
free_fn g_free = nullptr;
std::vector<CUdeviceptr> g_kept;

__attribute__((noinline)) void leak_user_buffers() {
  for (int i = 0; i < 2; ++i) {
    CUdeviceptr p = 0;
    if (g_alloc(&p, 3u << 20) != CUDA_SUCCESS) _exit(3);
    g_kept.push_back(p);
  }
}

__attribute__((noinline)) void churn() {
  for (int i = 0; i < 10; ++i) {
    CUdeviceptr p = 0;
    if (g_alloc(&p, 1u << 20) != CUDA_SUCCESS) _exit(3);
    g_free(p);
  }
}

} // namespace

int main() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 2;
  g_dir.assign(exe, static_cast<std::size_t>(n)); // absolute: the trace's module map names it
  g_dir = g_dir.substr(0, g_dir.rfind('/'));
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (cuda == nullptr) {
    std::fprintf(stderr, "framework_sites: %s\n", dlerror());
    return 2;
  }
  if (sym<CUresult (*)(unsigned)>(cuda, "cuInit")(0) != CUDA_SUCCESS) return 2;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  sym<CUresult (*)(CUdevice*, int)>(cuda, "cuDeviceGet")(&dev, 0);
  sym<CUresult (*)(CUcontext*, CUdevice)>(cuda, "cuDevicePrimaryCtxRetain")(&ctx, dev);
  sym<CUresult (*)(CUcontext)>(cuda, "cuCtxSetCurrent")(ctx);
  g_alloc = sym<alloc_fn>(cuda, "cuMemAlloc_v2");
  g_free = sym<free_fn>(cuda, "cuMemFree_v2");

  const auto segment =
      sym<CUdeviceptr (*)(std::size_t)>(library("libc10_cuda.so"), "fake_c10_cuda_segment");
  const auto pinned =
      sym<void* (*)(std::size_t)>(library("libtorch_cuda.so"), "fake_torch_cuda_pinned");
  const auto cublas_create =
      sym<int (*)(CUdeviceptr*)>(library("libcublas.so.13"), "cublasCreate_v2");
  for (const std::size_t mib : {20u, 20u, 1u, 1u})
    if (segment(mib << 20) == 0) return 3;
  if (pinned(64u << 10) == nullptr) return 3;
  CUdeviceptr workspace = 0;
  if (cublas_create(&workspace) != 0) return 3;
  churn();
  leak_user_buffers();
  std::printf("framework_sites: done\n");
  return 0;
}
