// The driver functions of the fake libcuda.so.1 (see fake_cuda.h). Error codes follow the real
// driver where the shim or the tests depend on them: cuMemAlloc of 0 bytes and frees of unknown
// pointers return CUDA_ERROR_INVALID_VALUE; cuMemFree_v2 and cuMemFreeHost synchronize the
// current context (every stream) first, as the real ones do, so a segment the pool trims is never
// released under work still queued.
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <thread>
#include <unistd.h>

#include "tests/fake_cuda/fake_state.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

using fake::get;

namespace {

constexpr std::size_t k_align = 512;

CUresult check_ready() {
  if (!get().initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return CUDA_SUCCESS;
}

void note_size(std::size_t bytes) {
  auto& c = get().count;
  std::uint64_t v = c.smallest_alloc.load();
  while (bytes < v && !c.smallest_alloc.compare_exchange_weak(v, bytes)) {
  }
  v = c.largest_alloc.load();
  while (bytes > v && !c.largest_alloc.compare_exchange_weak(v, bytes)) {
  }
}

// Registers a new allocation of `bytes` in the current context.
CUresult allocate(std::uintptr_t* out, std::size_t bytes, fake::mem_kind kind) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (out == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  fake::context* c = fake::current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto& st = get();
  const std::size_t rounded = (bytes + k_align - 1) / k_align * k_align;
  {
    std::lock_guard lock(st.mu);
    auto& used = st.used_bytes[static_cast<std::size_t>(c->device)];
    if (kind == fake::mem_kind::device && used + rounded > st.total_bytes) {
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    int fd = -1;
    void* p = fake::alloc_storage(
        rounded, kind == fake::mem_kind::device && rounded >= fake::k_shareable_bytes, &fd);
    if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    if (kind == fake::mem_kind::device) used += rounded;
    *out = reinterpret_cast<std::uintptr_t>(p);
    st.allocs[*out] = {bytes, c, kind, st.next_buffer_id++, fd};
  }
  st.count.live_allocs++;
  note_size(bytes);
  return CUDA_SUCCESS;
}

// Releases the allocation starting exactly at `address` if it has the given kind.
CUresult release(std::uintptr_t address, fake::mem_kind kind) {
  auto& st = get();
  std::lock_guard lock(st.mu);
  auto it = st.allocs.find(address);
  if (it == st.allocs.end() || it->second.kind != kind) {
    st.count.failed_frees++;
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (kind == fake::mem_kind::device) {
    st.used_bytes[static_cast<std::size_t>(it->second.ctx->device)] -=
        (it->second.bytes + k_align - 1) / k_align * k_align;
  }
  fake::free_storage(address, it->second);
  st.allocs.erase(it);
  st.count.live_allocs--;
  return CUDA_SUCCESS;
}

fake::context* new_context(int device, bool primary) {
  auto* c = new fake::context;
  c->device = device;
  c->primary = primary;
  c->legacy = new fake::stream(0, c);
  c->streams.push_back(c->legacy);
  get().contexts.push_back(c);
  return c;
}

void drop_context(fake::context* c) { // caller holds get().mu
  auto& st = get();
  fake::destroy_context_allocations(c);
  std::erase(st.contexts, c);
  if (fake::current() == c) fake::current() = nullptr;
  // The context object and its stream threads are leaked: work may still be queued on them.
}

} // namespace

// ---- init, devices -------------------------------------------------------------------------
FAKE_API CUresult cuInit(unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(get().mu);
  get().initialized = true;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDriverGetVersion(int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = fake::get().driver_version;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGetCount(int* count) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  *count = get().device_count;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (ordinal < 0 || ordinal >= get().device_count) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  std::strncpy(name, "fake_cuda device", static_cast<std::size_t>(len));
  name[len - 1] = '\0';
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDeviceTotalMem_v2(std::size_t* bytes, CUdevice) {
  *bytes = get().total_bytes;
  return CUDA_SUCCESS;
}

// The attributes the shim asks for; others are refused.
FAKE_API CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (value == nullptr || dev < 0 || dev >= get().device_count) return CUDA_ERROR_INVALID_VALUE;
  if (attribute == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED) {
    const char* mode = std::getenv("FAKE_CUDA_FD_EXPORT");
    *value = mode != nullptr && std::strcmp(mode, "0") == 0 ? 0 : 1;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

// ---- contexts ------------------------------------------------------------------------------
FAKE_API CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  auto& st = get();
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(st.mu);
  const auto d = static_cast<std::size_t>(dev);
  if (st.primary[d] == nullptr) st.primary[d] = new_context(dev, true);
  st.primary_refs[d]++;
  *pctx = reinterpret_cast<CUcontext>(st.primary[d]);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  auto& st = get();
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(st.mu);
  const auto d = static_cast<std::size_t>(dev);
  if (st.primary[d] == nullptr || st.primary_refs[d] == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--st.primary_refs[d] == 0) {
    drop_context(st.primary[d]);
    st.primary[d] = nullptr;
  }
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev) {
  auto& st = get();
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(st.mu);
  const auto d = static_cast<std::size_t>(dev);
  if (st.primary[d] != nullptr) {
    drop_context(st.primary[d]);
    st.primary[d] = nullptr;
    st.primary_refs[d] = 0;
  }
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  auto& st = get();
  if (dev < 0 || dev >= st.device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(st.mu);
  *flags = 0;
  *active = st.primary[static_cast<std::size_t>(dev)] != nullptr ? 1 : 0;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams*, unsigned int, CUdevice dev) {
  if (CUresult r = check_ready(); r != CUDA_SUCCESS) return r;
  if (dev < 0 || dev >= get().device_count) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(get().mu);
  fake::context* c = new_context(dev, false);
  if (fake::current() != nullptr) fake::ctx_stack().push_back(fake::current());
  fake::current() = c;
  *pctx = reinterpret_cast<CUcontext>(c);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return cuCtxCreate_v4(pctx, nullptr, flags, dev);
}
FAKE_API CUresult cuCtxDestroy_v2(CUcontext ctx) {
  auto* c = reinterpret_cast<fake::context*>(ctx);
  fake::synchronize_context(c);
  std::lock_guard lock(get().mu);
  if (!fake::live_context(c) || c->primary) return CUDA_ERROR_INVALID_CONTEXT;
  drop_context(c);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pctx = reinterpret_cast<CUcontext>(fake::current());
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxSetCurrent(CUcontext ctx) {
  fake::current() = reinterpret_cast<fake::context*>(ctx);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fake::current() != nullptr) fake::ctx_stack().push_back(fake::current());
  fake::current() = reinterpret_cast<fake::context*>(ctx);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  if (fake::current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = reinterpret_cast<CUcontext>(fake::current());
  auto& stack = fake::ctx_stack();
  fake::current() = stack.empty() ? nullptr : stack.back();
  if (!stack.empty()) stack.pop_back();
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxGetDevice(CUdevice* device) {
  if (fake::current() == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *device = fake::current()->device;
  return CUDA_SUCCESS;
}
// Like the driver, a context synchronization while a stream of the context captures a graph
// fails and invalidates that capture (seen on an H100, driver 580, with a thread-local capture
// open on another thread).
FAKE_API CUresult cuCtxSynchronize_v2(CUcontext ctx) {
  auto* c = ctx != nullptr ? reinterpret_cast<fake::context*>(ctx) : fake::current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  get().count.ctx_syncs++;
  if (fake::invalidate_captures(c)) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  fake::synchronize_context(c);
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuCtxSynchronize() {
  return cuCtxSynchronize_v2(nullptr);
}

// ---- memory --------------------------------------------------------------------------------
FAKE_API CUresult cuMemAlloc_v2(CUdeviceptr* dptr, std::size_t bytes) {
  get().count.mem_alloc_calls++;
  std::uintptr_t p = 0;
  CUresult r = allocate(&p, bytes, fake::mem_kind::device);
  if (r == CUDA_SUCCESS) *dptr = p;
  return r;
}
// The CUDA 3.1 form with a 32-bit size; the shim must not mistake it for cuMemAlloc_v2.
#undef cuMemAlloc
FAKE_API CUresult cuMemAlloc(unsigned int* dptr, unsigned int bytes) {
  get().count.mem_alloc_calls++;
  std::uintptr_t p = 0;
  CUresult r = allocate(&p, bytes, fake::mem_kind::device);
  if (r == CUDA_SUCCESS) *dptr = static_cast<unsigned int>(p); // truncated, as on old ABIs
  return r;
}
FAKE_API CUresult cuMemFree_v2(CUdeviceptr dptr) {
  get().count.mem_free_calls++;
  if (fake::current() != nullptr) fake::synchronize_context(fake::current());
  return release(dptr, fake::mem_kind::device);
}
FAKE_API CUresult cuMemAllocAsync(CUdeviceptr* dptr, std::size_t bytes, CUstream) {
  get().count.async_alloc_calls++;
  std::uintptr_t p = 0;
  CUresult r = allocate(&p, bytes, fake::mem_kind::device);
  if (r == CUDA_SUCCESS) *dptr = p;
  return r;
}
FAKE_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr* dptr, std::size_t bytes, CUstream s) {
  return cuMemAllocAsync(dptr, bytes, s);
}
FAKE_API CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream s) {
  get().count.async_free_calls++;
  fake::stream* st = fake::resolve_stream(s);
  if (st == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  {
    std::lock_guard lock(get().mu);
    auto it = get().allocs.find(dptr);
    if (it == get().allocs.end() || it->second.kind != fake::mem_kind::device) {
      get().count.failed_frees++;
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  fake::submit(st, [dptr] { (void)release(dptr, fake::mem_kind::device); });
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return cuMemFreeAsync(dptr, s);
}
FAKE_API CUresult cuMemAllocManaged(CUdeviceptr* dptr, std::size_t bytes, unsigned int) {
  std::uintptr_t p = 0;
  CUresult r = allocate(&p, bytes, fake::mem_kind::managed);
  if (r == CUDA_SUCCESS) *dptr = p;
  return r;
}
FAKE_API CUresult cuMemAllocPitch_v2(CUdeviceptr* dptr, std::size_t* pitch, std::size_t width,
                                     std::size_t height, unsigned int) {
  const std::size_t p = (width + k_align - 1) / k_align * k_align;
  *pitch = p;
  return cuMemAlloc_v2(dptr, p * height);
}
FAKE_API CUresult cuMemHostAlloc(void** pp, std::size_t bytes, unsigned int) {
  get().count.host_alloc_calls++;
  std::uintptr_t p = 0;
  CUresult r = allocate(&p, bytes, fake::mem_kind::host);
  if (r == CUDA_SUCCESS) *pp = reinterpret_cast<void*>(p);
  return r;
}
FAKE_API CUresult cuMemAllocHost_v2(void** pp, std::size_t bytes) {
  return cuMemHostAlloc(pp, bytes, 0);
}
FAKE_API CUresult cuMemFreeHost(void* p) {
  get().count.host_free_calls++;
  if (fake::current() != nullptr) fake::synchronize_context(fake::current());
  return release(reinterpret_cast<std::uintptr_t>(p), fake::mem_kind::host);
}
FAKE_API CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  fake::context* c = fake::current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  std::lock_guard lock(get().mu);
  *total_bytes = get().total_bytes;
  *free_bytes = get().total_bytes - get().used_bytes[static_cast<std::size_t>(c->device)];
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, std::size_t* size, CUdeviceptr p) {
  std::lock_guard lock(get().mu);
  auto it = fake::find_allocation(p);
  if (it == get().allocs.end()) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = it->first;
  if (size != nullptr) *size = it->second.bytes;
  return CUDA_SUCCESS;
}
FAKE_API CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr p) {
  std::lock_guard lock(get().mu);
  auto it = fake::find_allocation(p);
  if (it == get().allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  const fake::allocation& a = it->second;
  switch (attribute) {
  case CU_POINTER_ATTRIBUTE_CONTEXT:
    *static_cast<CUcontext*>(data) = reinterpret_cast<CUcontext>(a.ctx);
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
    *static_cast<unsigned*>(data) =
        a.kind == fake::mem_kind::host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
    *static_cast<CUdeviceptr*>(data) = p;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    *static_cast<unsigned long long*>(data) = a.buffer_id;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_IS_MANAGED:
    *static_cast<int*>(data) = a.kind == fake::mem_kind::managed ? 1 : 0;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
    *static_cast<int*>(data) = a.ctx->device;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    *static_cast<CUdeviceptr*>(data) = it->first;
    return CUDA_SUCCESS;
  case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    *static_cast<std::size_t*>(data) = a.bytes;
    return CUDA_SUCCESS;
  default:
    return CUDA_ERROR_INVALID_VALUE;
  }
}
FAKE_API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attributes,
                                         void** data, CUdeviceptr p) {
  for (unsigned i = 0; i < n; ++i) {
    if (CUresult r = cuPointerGetAttribute(data[i], attributes[i], p); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

// Not a CUDA function, a test hook: allocates `bytes` in `ctx` on a thread the library starts
// and joins, which runs no Python code (as PyTorch's autograd threads do not), through the
// cuMemAlloc_v2 the process resolves globally (the shim's when it is preloaded), else this one.
FAKE_API CUresult fake_cuda_alloc_on_native_thread(CUcontext ctx, std::size_t bytes,
                                                   CUdeviceptr* out) {
  using alloc_fn = CUresult (*)(CUdeviceptr*, std::size_t);
  auto alloc = reinterpret_cast<alloc_fn>(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"));
  if (alloc == nullptr) alloc = &cuMemAlloc_v2;
  CUresult r = CUDA_ERROR_UNKNOWN;
  std::thread t([&] {
    r = cuCtxSetCurrent(ctx);
    if (r == CUDA_SUCCESS) r = alloc(out, bytes);
  });
  t.join();
  return r;
}
