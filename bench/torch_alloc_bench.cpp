// Allocation cost of PyTorch's caching allocator through its C++ API
// (c10::cuda::CUDACachingAllocator::raw_alloc / raw_delete), with the same loops as
// alloc_bench (alloc_harness.h). Built on the GPU machine against the installed torch as a
// shared library and driven by torch_alloc_bench.py, which imports torch first so that the
// allocator is initialized exactly as in a PyTorch program.
#include "alloc_harness.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <cstdio>

namespace {

class torch_allocator final : public gmem_bench::allocator_under_test {
public:
  const char* name() const override { return "torch.CUDACachingAllocator"; }
  void* allocate(std::size_t bytes, int) override {
    try {
      return c10::cuda::CUDACachingAllocator::raw_alloc(bytes);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "torch_alloc_bench: raw_alloc(%zu) failed: %s\n", bytes, e.what());
      return nullptr;
    }
  }
  bool deallocate(void* p, std::size_t, int) override {
    try {
      c10::cuda::CUDACachingAllocator::raw_delete(p);
      return true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "torch_alloc_bench: raw_delete failed: %s\n", e.what());
      return false;
    }
  }
};

} // namespace

extern "C" __attribute__((visibility("default"))) int torch_alloc_bench_main(int argc,
                                                                             char** argv) {
  gmem_bench::harness_options o;
  o.label = "torch-caching";
  gmem_bench::parse_args(o, argc, argv);
  torch_allocator a;
  gmem_bench::run_suite(a, o);
  return 0;
}
