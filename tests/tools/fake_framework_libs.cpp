// Stand-ins for PyTorch's and cuBLAS's shared libraries, for the framework readers' end-to-end
// test (tests/tools/frameworks_e2e_test.sh): built three times (FAKE_LIB = 1, 2, 3) as
// libc10_cuda.so, libtorch_cuda.so and libcublas.so.13, with the real libraries' function
// names, so gmem recognises them from what the symbolizer reads in their symbol tables. Each
// reaches the driver as the real ones do (dlopen libcuda.so.1 + dlsym): under gmem run, through
// libgmem.so, against the fake driver.
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))
#define FAKE_EXPORT_VAR __attribute__((visibility("default")))

namespace {

template <typename F> F driver(const char* name) {
  static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  return lib != nullptr ? reinterpret_cast<F>(dlsym(lib, name)) : nullptr;
}

[[maybe_unused]] __attribute__((noinline)) CUdeviceptr device_alloc(std::size_t bytes) {
  CUdeviceptr p = 0;
  const auto alloc = driver<CUresult (*)(CUdeviceptr*, std::size_t)>("cuMemAlloc_v2");
  return alloc != nullptr && alloc(&p, bytes) == CUDA_SUCCESS ? p : 0;
}

} // namespace

#if FAKE_LIB == 1 // libc10_cuda.so: PyTorch's caching allocator grows by a segment

namespace c10::cuda::CUDACachingAllocator::Native {
class DeviceCachingAllocator {
public:
  __attribute__((noinline)) CUdeviceptr malloc(std::size_t bytes) { return device_alloc(bytes); }
};
} // namespace c10::cuda::CUDACachingAllocator::Native

FAKE_EXPORT CUdeviceptr fake_c10_cuda_segment(std::size_t bytes) {
  static c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator allocator;
  return allocator.malloc(bytes);
}

// PyTorch 2.11's allocator as gmem's per-tensor observation sees it (tests/tools/
// observe_e2e_test.sh): the exported variable c10::cuda::CUDACachingAllocator::allocator holds
// the active allocator, an object whose vtable slot 44 is attachAllocatorTraceTracker; every
// other slot is null, so a wrong slot crashes the test. The allocator exists only after
// fake_c10_cuda_init() (CUDA's lazy initialization), and trackers receive 136-byte TraceEntry
// records laid out as PyTorch 2.11's.
namespace {
struct trace_entry {
  unsigned char bytes[136];
};
using tracker = std::function<void(const trace_entry&)>;
struct fake_allocator {
  void* const* vtable;
  std::vector<tracker> trackers;
  CUdeviceptr segment = 0;
  std::size_t segment_bytes = 0, used = 0;
};
void attach(fake_allocator* self, tracker t) {
  self->trackers.push_back(std::move(t));
}
void* g_vtable[50];
fake_allocator* g_fake = nullptr;

void emit(int action, int device, std::uint64_t addr, std::uint64_t size, std::uint64_t stream) {
  trace_entry e{};
  const std::int32_t a = action;
  const std::int8_t d = static_cast<std::int8_t>(device);
  std::memcpy(e.bytes + 0, &a, 4);
  std::memcpy(e.bytes + 4, &d, 1);
  std::memcpy(e.bytes + 8, &addr, 8);
  std::memcpy(e.bytes + 32, &stream, 8);
  std::memcpy(e.bytes + 40, &size, 8);
  for (const auto& t : g_fake->trackers)
    t(e);
}
} // namespace

namespace c10::cuda::CUDACachingAllocator {
FAKE_EXPORT_VAR std::atomic<void*> allocator{nullptr};
} // namespace c10::cuda::CUDACachingAllocator

FAKE_EXPORT void fake_c10_cuda_init() {
  if (g_fake != nullptr) return;
  // CUDA's initialization, as torch.cuda's lazy init makes it: the primary context, current.
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (driver<CUresult (*)(unsigned)>("cuInit")(0) != CUDA_SUCCESS ||
      driver<CUresult (*)(CUdevice*, int)>("cuDeviceGet")(&dev, 0) != CUDA_SUCCESS ||
      driver<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain")(&ctx, dev) !=
          CUDA_SUCCESS ||
      driver<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx) != CUDA_SUCCESS)
    return;
  g_vtable[44] = reinterpret_cast<void*>(&attach);
  g_fake = new fake_allocator{g_vtable, {}};
  c10::cuda::CUDACachingAllocator::allocator.store(g_fake);
}

// A tensor of `bytes` carved from the allocator's segment (one 64 MiB segment from the
// driver, as the cache asks for it), reported to the trackers as ALLOC; 0 when it is full.
FAKE_EXPORT CUdeviceptr fake_c10_cuda_tensor(std::size_t bytes) {
  if (g_fake == nullptr) return 0;
  if (g_fake->segment == 0) {
    g_fake->segment_bytes = 64u << 20;
    g_fake->segment = fake_c10_cuda_segment(g_fake->segment_bytes);
  }
  const std::size_t rounded = (bytes + 511) / 512 * 512;
  if (g_fake->segment == 0 || g_fake->used + rounded > g_fake->segment_bytes) return 0;
  const CUdeviceptr p = g_fake->segment + g_fake->used;
  g_fake->used += rounded;
  emit(0, 0, p, bytes, 0);
  return p;
}

// The program frees a tensor: FREE_REQUESTED, then FREE_COMPLETED (its space is not reused).
FAKE_EXPORT void fake_c10_cuda_free(CUdeviceptr p) {
  if (g_fake == nullptr) return;
  emit(1, 0, p, 0, 0);
  emit(2, 0, p, 0, 0);
}

// PyTorch's autograd engine as gmem meets it (tests/tools/backward_line_e2e_test.sh): the
// backward pass runs on a native thread named pt_autograd_0, which allocates `count`
// gradients of `bytes` through the caching allocator (reported to the trackers) and, with
// `raw`, one more buffer straight from the driver (as PYTORCH_NO_CUDA_MEMORY_CACHING=1 makes
// it); the calling thread waits for it, as the engine's caller does. The addresses go to
// `out` (count + raw of them). 0 on success.
FAKE_EXPORT int fake_c10_cuda_run_backward(std::size_t bytes, int count, int raw,
                                           CUdeviceptr* out) {
  if (g_fake == nullptr || count < 0) return 1;
  CUcontext ctx = nullptr;
  if (driver<CUresult (*)(CUcontext*)>("cuCtxGetCurrent")(&ctx) != CUDA_SUCCESS) return 1;
  int failed = 0;
  std::thread engine([&] {
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    if (driver<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(ctx) != CUDA_SUCCESS) {
      failed = 1;
      return;
    }
    for (int i = 0; i < count; ++i)
      if ((out[i] = fake_c10_cuda_tensor(bytes)) == 0) failed = 1;
    if (raw != 0 && (out[count] = device_alloc(bytes)) == 0) failed = 1;
  });
  engine.join();
  return failed;
}

// Any record, for the sanity check.
FAKE_EXPORT void fake_c10_cuda_emit(int action, int device, std::uint64_t addr,
                                    std::uint64_t size) {
  if (g_fake != nullptr) emit(action, device, addr, size, 0);
}

#elif FAKE_LIB == 2 // libtorch_cuda.so: PyTorch's pinned host cache

namespace at::cuda {
class CUDACachingHostAllocatorImpl {
public:
  __attribute__((noinline)) void* allocate_host_memory_slowpath(std::size_t bytes) {
    void* p = nullptr;
    const auto alloc = driver<CUresult (*)(void**, std::size_t, unsigned)>("cuMemHostAlloc");
    return alloc != nullptr && alloc(&p, bytes, 0) == CUDA_SUCCESS ? p : nullptr;
  }
};
} // namespace at::cuda

FAKE_EXPORT void* fake_torch_cuda_pinned(std::size_t bytes) {
  static at::cuda::CUDACachingHostAllocatorImpl allocator;
  return allocator.allocate_host_memory_slowpath(bytes);
}

#elif FAKE_LIB == 3 // libcublas.so.13: a handle's workspace

FAKE_EXPORT int cublasCreate_v2(CUdeviceptr* workspace) {
  *workspace = device_alloc(4u << 20);
  return *workspace != 0 ? 0 : 1;
}

#else
#error "FAKE_LIB must be 1, 2 or 3"
#endif
