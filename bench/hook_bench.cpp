// Cost of the hook path without the CUDA runtime: cuMemAlloc_v2 + cuMemFree_v2 pairs through a
// driver reached by dlopen + dlsym (route 2 of DESIGN.md "Interception") or dlopen +
// cuGetProcAddress (route 3), with the shared harness (alloc_harness.h).
//   hook_bench [--route dlsym|proc] [harness options]
// With the fake driver (LD_LIBRARY_PATH=build/tests/fake_cuda) it needs no GPU, so the shim's
// own cost can be profiled on any machine:
//   LD_LIBRARY_PATH=build/tests/fake_cuda LD_PRELOAD=build/lib/libgmem.so GMEM_TRACE=0
//   build/bench/hook_bench --tests pair --sizes 512,64K,1M
// (the fake driver's own allocation memsets host memory, so compare with and without the
// shim only at sizes the pool serves from cache after warm-up).
#include "alloc_harness.h"

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

using alloc_fn = CUresult (*)(CUdeviceptr*, std::size_t);
using free_fn = CUresult (*)(CUdeviceptr);
using init_fn = CUresult (*)(unsigned);
using retain_fn = CUresult (*)(CUcontext*, CUdevice);
using set_fn = CUresult (*)(CUcontext);
using proc_fn = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

class driver_calls final : public gmem_bench::allocator_under_test {
public:
  driver_calls(alloc_fn a, free_fn f, retain_fn r, set_fn s)
      : alloc_(a), free_(f), retain_(r), set_(s) {}
  const char* name() const override { return "cuMemAlloc_v2 (dlopen)"; }
  void thread_begin(int) override {
    CUcontext c = nullptr;
    if (retain_(&c, 0) == CUDA_SUCCESS) set_(c);
  }
  void* allocate(std::size_t bytes, int) override {
    CUdeviceptr p = 0;
    if (CUresult r = alloc_(&p, bytes); r != CUDA_SUCCESS) {
      std::fprintf(stderr, "hook_bench: cuMemAlloc_v2(%zu) failed: %d\n", bytes, int(r));
      return nullptr;
    }
    return reinterpret_cast<void*>(p);
  }
  bool deallocate(void* p, std::size_t, int) override {
    return free_(reinterpret_cast<CUdeviceptr>(p)) == CUDA_SUCCESS;
  }

private:
  alloc_fn alloc_;
  free_fn free_;
  retain_fn retain_;
  set_fn set_;
};

template <class T> T sym(void* lib, proc_fn proc, const char* name) {
  void* p = nullptr;
  if (proc) {
    CUdriverProcAddressQueryResult q{};
    std::string base(name);
    if (auto at = base.find("_v2"); at != std::string::npos) base.resize(at);
    if (proc(base.c_str(), &p, 12000, CU_GET_PROC_ADDRESS_DEFAULT, &q) != CUDA_SUCCESS) p = nullptr;
  } else {
    p = dlsym(lib, name);
  }
  if (!p) std::fprintf(stderr, "hook_bench: cannot find %s in libcuda.so.1\n", name);
  return reinterpret_cast<T>(p);
}

} // namespace

int main(int argc, char** argv) {
  gmem_bench::harness_options o;
  o.tests = "pair";
  o.sizes = {512, 65536, 1u << 20};
  std::string route = "dlsym";
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--route") == 0) route = argv[i + 1];
  gmem_bench::parse_args(o, argc, argv);
  if (o.label.empty()) o.label = "hook-" + route;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    std::fprintf(stderr, "hook_bench: cannot load libcuda.so.1 (%s); nothing measured\n",
                 dlerror());
    return 2;
  }
  proc_fn proc = nullptr;
  if (route == "proc") proc = reinterpret_cast<proc_fn>(dlsym(lib, "cuGetProcAddress_v2"));
  auto init = sym<init_fn>(lib, nullptr, "cuInit");
  auto retain = sym<retain_fn>(lib, proc, "cuDevicePrimaryCtxRetain");
  auto set = sym<set_fn>(lib, proc, "cuCtxSetCurrent");
  auto alloc = sym<alloc_fn>(lib, proc, "cuMemAlloc_v2");
  auto release = sym<free_fn>(lib, proc, "cuMemFree_v2");
  if (!init || !retain || !set || !alloc || !release || init(0) != CUDA_SUCCESS) {
    std::fprintf(stderr, "hook_bench: driver not usable; nothing measured\n");
    return 2;
  }
  driver_calls a(alloc, release, retain, set);
  gmem_bench::run_suite(a, o);
  return 0;
}
