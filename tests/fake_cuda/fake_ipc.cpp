// Legacy CUDA IPC in the fake driver, across processes: cuIpcGetMemHandle names a device
// allocation that starts exactly at the pointer (the real handle names the whole allocation;
// the fake refuses interior pointers to make that visible) and is backed by a memfd (device
// allocations of at least 256 KiB); cuIpcOpenMemHandle in another process maps that memfd
// through /proc/PID/fd/N (same user); cuIpcCloseMemHandle unmaps it. Like the driver, a
// process cannot open its own handle (CUDA_ERROR_INVALID_CONTEXT) nor open one handle twice
// (CUDA_ERROR_ALREADY_MAPPED), and bytes that are no handle fail (CUDA_ERROR_INVALID_VALUE).
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <tuple>
#include <unistd.h>

#include "tests/fake_cuda/fake_state.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

using fake::get;

namespace {

constexpr char k_magic[8] = {'F', 'A', 'K', 'E', 'I', 'P', 'C', '1'};

struct fake_handle {
  char magic[8];
  std::uint32_t pid;
  std::int32_t fd;
  std::uint64_t bytes;
  std::uint64_t buffer_id;
};
static_assert(sizeof(fake_handle) <= sizeof(CUipcMemHandle));

// (exporter pid, buffer id) -> the address it is mapped at here. Guarded by get().mu.
std::map<std::pair<std::uint32_t, std::uint64_t>, std::uintptr_t>& opened() {
  static auto* m = new std::map<std::pair<std::uint32_t, std::uint64_t>, std::uintptr_t>;
  return *m;
}

} // namespace

FAKE_API CUresult cuIpcGetMemHandle(CUipcMemHandle* handle, CUdeviceptr p) {
  std::lock_guard lock(get().mu);
  auto it = get().allocs.find(p);
  if (handle == nullptr || it == get().allocs.end() || it->second.kind != fake::mem_kind::device)
    return CUDA_ERROR_INVALID_VALUE;
  if (it->second.fd < 0) return CUDA_ERROR_NOT_SUPPORTED; // fake: below 256 KiB, not shareable
  fake_handle h{};
  std::memcpy(h.magic, k_magic, sizeof k_magic);
  h.pid = static_cast<std::uint32_t>(::getpid());
  h.fd = it->second.fd;
  h.bytes = it->second.bytes;
  h.buffer_id = it->second.buffer_id;
  std::memset(handle, 0, sizeof(*handle));
  std::memcpy(handle->reserved, &h, sizeof h);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuIpcOpenMemHandle_v2(CUdeviceptr* out, CUipcMemHandle handle, unsigned int) {
  fake_handle h{};
  std::memcpy(&h, handle.reserved, sizeof h);
  if (out == nullptr || std::memcmp(h.magic, k_magic, sizeof k_magic) != 0 || h.bytes == 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (h.pid == static_cast<std::uint32_t>(::getpid())) return CUDA_ERROR_INVALID_CONTEXT;
  fake::context* c = fake::current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  auto& st = get();
  std::lock_guard lock(st.mu);
  if (opened().count({h.pid, h.buffer_id}) != 0) return CUDA_ERROR_ALREADY_MAPPED;
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE; // the exporter is gone or freed it
  struct stat sb {};
  const std::size_t rounded = (h.bytes + 511) / 512 * 512;
  void* p = ::fstat(fd, &sb) == 0 && static_cast<std::uint64_t>(sb.st_size) >= rounded
                ? ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  ::close(fd);
  if (p == MAP_FAILED) return CUDA_ERROR_INVALID_HANDLE;
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  st.allocs[address] = {h.bytes, c, fake::mem_kind::ipc, h.buffer_id, -2};
  opened()[{h.pid, h.buffer_id}] = address;
  *out = address;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuIpcCloseMemHandle(CUdeviceptr p) {
  auto& st = get();
  std::lock_guard lock(st.mu);
  auto it = st.allocs.find(p);
  if (it == st.allocs.end() || it->second.kind != fake::mem_kind::ipc)
    return CUDA_ERROR_INVALID_VALUE;
  for (auto o = opened().begin(); o != opened().end(); ++o) {
    if (o->second == p) {
      opened().erase(o);
      break;
    }
  }
  fake::free_storage(p, it->second);
  st.allocs.erase(it);
  return CUDA_SUCCESS;
}
