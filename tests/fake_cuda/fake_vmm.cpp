// Virtual memory management of the fake driver (cuMemCreate, cuMemAddressReserve, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), over memfd so that it behaves
// like the real one where the shim depends on it:
// - a physical allocation (memfd) may be mapped at several addresses, and lives until it is
//   released and no longer mapped;
// - a mapping has no access until cuMemSetAccess (PROT_NONE before), so forgetting it faults;
//   cuMemSetAccess takes one mapping or a run of contiguous ones, never a hole or a part;
// - cuMemUnmap does NOT synchronize (measured on the H200: 33-43 us behind a 200 ms kernel,
//   bench/probes/driver_facts.cu): a "kernel" still writing through an unmapped range faults,
//   which is how the tests catch a segment retired too early.
// Mapped ranges are registered as allocations of kind vmm, so pointer queries answer for them.
// Shareable handles, as CUDA IPC of VMM memory uses them (PyTorch's expandable segments too): a
// physical allocation created with requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
// exports a descriptor (cuMemExportToShareableHandle: a duplicate of its memfd), which
// cuMemImportFromShareableHandle, in any process it was passed to, turns into a new handle of
// the same memory; others refuse to export. FAKE_CUDA_FD_EXPORT: 1 (default) = supported
// (cuDeviceGetAttribute says so); 0 = the attribute says no; create = the attribute says yes
// but cuMemCreate refuses the handle type (CUDA_ERROR_NOT_SUPPORTED).
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <string>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/fake_cuda/fake_state.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

using fake::get;

namespace {

constexpr std::size_t k_granularity = std::size_t{2} << 20; // as the H200 reports

struct physical {
  int fd = -1;
  std::size_t bytes = 0;
  int device = 0;
  int mappings = 0;
  bool released = false;
  bool exportable = false; // created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
  bool imported = false;   // another process's memory: not counted on this device
};

std::string fd_export_mode() {
  const char* m = std::getenv("FAKE_CUDA_FD_EXPORT");
  return m != nullptr ? m : "1";
}

struct mapping {
  physical* phys = nullptr;
  std::size_t bytes = 0;
};

std::map<std::uintptr_t, mapping> g_mappings; // by address; guarded by get().mu

void free_if_unused(physical* p) { // caller holds get().mu
  if (!p->released || p->mappings != 0) return;
  close(p->fd);
  if (!p->imported) get().used_bytes[static_cast<std::size_t>(p->device)] -= p->bytes;
  get().count.vmm_releases++; // the physical memory is back
  delete p;
}

} // namespace

FAKE_API CUresult cuMemGetAllocationGranularity(std::size_t* granularity,
                                                const CUmemAllocationProp* prop,
                                                CUmemAllocationGranularity_flags) {
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *granularity = k_granularity;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemCreate(CUmemGenericAllocationHandle* handle, std::size_t bytes,
                              const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || prop == nullptr || flags != 0 || bytes == 0 ||
      bytes % k_granularity != 0 || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      prop->location.id < 0 || prop->location.id >= get().device_count) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const bool exportable = prop->requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE &&
      (!exportable || fd_export_mode() != "1")) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  auto& st = get();
  std::lock_guard lock(st.mu);
  auto& used = st.used_bytes[static_cast<std::size_t>(prop->location.id)];
  if (used + bytes > st.total_bytes) return CUDA_ERROR_OUT_OF_MEMORY;
  const int fd = memfd_create("fake_cuda_vmm", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  used += bytes;
  st.count.vmm_creates++;
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(
      new physical{fd, bytes, prop->location.id, 0, false, exportable, false});
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemExportToShareableHandle(void* shareable, CUmemGenericAllocationHandle handle,
                                               CUmemAllocationHandleType type,
                                               unsigned long long flags) {
  auto* p = reinterpret_cast<physical*>(handle);
  if (shareable == nullptr || p == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(get().mu);
  if (p->released) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !p->exportable)
    return CUDA_ERROR_NOT_PERMITTED; // the real driver: the type was not requested at creation
  const int fd = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareable) = fd;
  get().count.vmm_exports++;
  return CUDA_SUCCESS;
}

// The descriptor stays the caller's (it closes it); the handle keeps its own duplicate.
FAKE_API CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                 void* os_handle, CUmemAllocationHandleType type) {
  const auto fd = static_cast<int>(reinterpret_cast<std::intptr_t>(os_handle));
  struct stat sb {};
  if (handle == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || fd < 0 ||
      fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || sb.st_size <= 0 ||
      static_cast<std::size_t>(sb.st_size) % k_granularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  fake::context* c = fake::current();
  std::lock_guard lock(get().mu);
  get().count.vmm_imports++;
  *handle = reinterpret_cast<CUmemGenericAllocationHandle>(
      new physical{own, static_cast<std::size_t>(sb.st_size), c != nullptr ? c->device : 0, 0,
                   false, true, true});
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemRelease(CUmemGenericAllocationHandle handle) {
  auto* p = reinterpret_cast<physical*>(handle);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(get().mu);
  if (p->released) return CUDA_ERROR_INVALID_VALUE;
  p->released = true;
  free_if_unused(p);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAddressReserve(CUdeviceptr* ptr, std::size_t bytes, std::size_t alignment,
                                      CUdeviceptr, unsigned long long) {
  if (ptr == nullptr || bytes == 0 || bytes % k_granularity != 0) return CUDA_ERROR_INVALID_VALUE;
  const std::size_t align = alignment > k_granularity ? alignment : k_granularity;
  // Over-reserve, then cut to an aligned range.
  void* raw =
      mmap(nullptr, bytes + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto start = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (start + align - 1) / align * align;
  if (aligned > start) munmap(raw, aligned - start);
  if (const std::uintptr_t end = start + bytes + align; end > aligned + bytes)
    munmap(reinterpret_cast<void*>(aligned + bytes), end - aligned - bytes);
  *ptr = aligned;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemAddressFree(CUdeviceptr ptr, std::size_t bytes) {
  if (ptr == 0 || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(get().mu);
  auto it = g_mappings.lower_bound(ptr);
  if (it != g_mappings.end() && it->first < ptr + bytes) return CUDA_ERROR_INVALID_VALUE; // mapped
  munmap(reinterpret_cast<void*>(ptr), bytes);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemMap(CUdeviceptr ptr, std::size_t bytes, std::size_t offset,
                           CUmemGenericAllocationHandle handle, unsigned long long flags) {
  auto* p = reinterpret_cast<physical*>(handle);
  if (p == nullptr || flags != 0 || p->released || offset + bytes > p->bytes ||
      bytes % k_granularity != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto& st = get();
  std::lock_guard lock(st.mu);
  void* at = mmap(reinterpret_cast<void*>(ptr), bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, p->fd,
                  static_cast<off_t>(offset));
  if (at == MAP_FAILED) return CUDA_ERROR_INVALID_VALUE;
  ++p->mappings;
  g_mappings[ptr] = mapping{p, bytes};
  fake::context* c = fake::current();
  st.allocs[ptr] = {bytes, c != nullptr ? c : st.contexts.front(), fake::mem_kind::vmm,
                    st.next_buffer_id++};
  st.count.vmm_maps++;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemSetAccess(CUdeviceptr ptr, std::size_t bytes, const CUmemAccessDesc* desc,
                                 std::size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(get().mu);
  // One mapping or several contiguous ones (the real driver accepts a range spanning
  // mappings; PyTorch's expandable segments rely on it), exactly covered: no hole, no part.
  std::uintptr_t covered = ptr;
  for (auto it = g_mappings.find(ptr); covered < ptr + bytes; ++it) {
    if (it == g_mappings.end() || it->first != covered) return CUDA_ERROR_INVALID_VALUE;
    covered += it->second.bytes;
  }
  if (bytes == 0 || covered != ptr + bytes) return CUDA_ERROR_INVALID_VALUE;
  const bool rw = desc[0].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (mprotect(reinterpret_cast<void*>(ptr), bytes, rw ? PROT_READ | PROT_WRITE : PROT_READ) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuMemUnmap(CUdeviceptr ptr, std::size_t bytes) {
  auto& st = get();
  std::lock_guard lock(st.mu);
  auto it = g_mappings.find(ptr);
  if (it == g_mappings.end() || it->second.bytes != bytes) return CUDA_ERROR_INVALID_VALUE;
  // Back to a reservation: no access. No synchronization, as in the real driver.
  mmap(reinterpret_cast<void*>(ptr), bytes, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  physical* p = it->second.phys;
  g_mappings.erase(it);
  st.allocs.erase(ptr);
  st.count.vmm_unmaps++;
  --p->mappings;
  free_if_unused(p);
  return CUDA_SUCCESS;
}
