#include "interpose/ipc/ipc_sharing.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "interpose/ipc/ipc_vmm.h"
#include "interpose/real_call.h"
#include "interpose/upstream/vmm_upstream.h"

namespace gmem::shim {
namespace {

using trace::alloc_kind;

constexpr char k_handle_magic[8] = {'g', 'm', 'e', 'm', 'I', 'P', 'C', 1};
// The same layout for a block in virtual-memory mappings (ipc_vmm.h): the offset is the
// block's address minus that of the first physical piece behind it.
constexpr char k_vmm_handle_magic[8] = {'g', 'm', 'e', 'm', 'I', 'P', 'C', 2};
constexpr char k_registry_magic[8] = {'g', 'm', 'e', 'm', 'I', 'P', 'C', 'r'};
constexpr std::uint32_t k_registry_version = 1;
constexpr std::uint32_t k_max_slots = 4096;

// The handle gmem gives out for a block that does not start its cuMemAlloc segment, or lies in
// virtual-memory mappings (64 bytes).
struct gmem_handle {
  char magic[8];
  std::uint32_t pid;
  std::uint32_t slot;
  std::uint64_t nonce;
  std::uint64_t generation; // the slot's record, checked by the importer
  std::uint64_t offset;     // block address - segment base
  std::uint64_t size;       // block size (rounded)
  std::uint64_t reserved[2];
};
static_assert(sizeof(gmem_handle) == sizeof(CUipcMemHandle));

// The registry file: a header, then one record per slot at k_header_bytes + slot * 128.
struct registry_header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t pid;
  std::uint64_t nonce;
  std::uint64_t reserved[5];
};
struct registry_record {
  std::uint64_t generation; // 0 = unused
  std::uint64_t offset;
  std::uint64_t size;
  std::uint64_t reserved;
  CUipcMemHandle segment; // the driver's handle of the segment
  std::uint64_t pad[4];
};
static_assert(sizeof(registry_header) == 64 && sizeof(registry_record) == 128);

std::string registry_path(std::uint32_t pid, std::uint64_t nonce) {
  char name[96];
  std::snprintf(name, sizeof name, "/dev/shm/gmem-ipc.%u.%016llx", pid,
                static_cast<unsigned long long>(nonce));
  return name;
}

bool same_bytes(const CUipcMemHandle& a, const CUipcMemHandle& b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

std::string hex(std::uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

void warn(const std::string& text) {
  std::fprintf(stderr, "gmem: %s\n", text.c_str());
}

// This process's registry (exporter side). Records are written once per (segment handle,
// offset) and never rewritten, so a handle given out stays valid while the block is live.
class exports {
public:
  // The slot of (segment, offset, size), written to the file on first use; false when the
  // registry cannot be created or is full (`why` says which).
  bool publish(const CUipcMemHandle& segment, std::uint64_t offset, std::uint64_t size,
               std::uint32_t* slot, std::uint64_t* nonce, std::string* why) {
    std::lock_guard lock(mu_);
    for (std::uint32_t i = 0; i < records_.size(); ++i) {
      const registry_record& r = records_[i];
      if (r.offset == offset && r.size == size && same_bytes(r.segment, segment)) {
        *slot = i;
        *nonce = nonce_;
        return true;
      }
    }
    if (fd_ < 0 && !create(why)) return false;
    if (records_.size() == k_max_slots) {
      *why = "the registry holds " + std::to_string(k_max_slots) + " exported blocks already";
      return false;
    }
    registry_record r{};
    r.generation = records_.size() + 1;
    r.offset = offset;
    r.size = size;
    r.segment = segment;
    const auto at = static_cast<off_t>(sizeof(registry_header) + records_.size() * sizeof r);
    if (::pwrite(fd_, &r, sizeof r, at) != static_cast<ssize_t>(sizeof r)) {
      *why = registry_path(pid_, nonce_) + ": " + std::strerror(errno);
      return false;
    }
    *slot = static_cast<std::uint32_t>(records_.size());
    *nonce = nonce_;
    records_.push_back(r);
    return true;
  }
  std::uint64_t generation(std::uint32_t slot) {
    std::lock_guard lock(mu_);
    return slot < records_.size() ? records_[slot].generation : 0;
  }
  void remove() {
    std::lock_guard lock(mu_);
    if (fd_ < 0 || pid_ != static_cast<std::uint32_t>(::getpid())) return; // a forked child
    ::unlink(registry_path(pid_, nonce_).c_str());
    ::close(fd_);
    fd_ = -1;
  }

private:
  bool create(std::string* why) {
    pid_ = static_cast<std::uint32_t>(::getpid());
    std::random_device rd;
    nonce_ = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    const std::string path = registry_path(pid_, nonce_);
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      *why = path + ": " + std::strerror(errno);
      return false;
    }
    registry_header h{};
    std::memcpy(h.magic, k_registry_magic, sizeof h.magic);
    h.version = k_registry_version;
    h.pid = pid_;
    h.nonce = nonce_;
    if (::pwrite(fd_, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
      *why = path + ": " + std::strerror(errno);
      ::unlink(path.c_str());
      ::close(fd_);
      fd_ = -1;
      return false;
    }
    return true;
  }

  std::mutex mu_;
  int fd_ = -1;
  std::uint32_t pid_ = 0;
  std::uint64_t nonce_ = 0;
  std::vector<registry_record> records_;
};

exports& my_exports() {
  static auto* e = new exports; // never destroyed: hooks run during exit
  return *e;
}

// Reads the segment handle of `h` from its exporter's registry. Every byte is checked: the
// file belongs to another process (of this user, or it is refused).
bool read_registry(const gmem_handle& h, CUipcMemHandle* segment, std::string* why) {
  const std::string path = registry_path(h.pid, h.nonce);
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    *why = path + ": " + std::strerror(errno) + " (the exporting process (pid " +
           std::to_string(h.pid) + ") has exited or runs as another user)";
    return false;
  }
  struct stat st {};
  registry_header head{};
  registry_record r{};
  const auto at = static_cast<off_t>(sizeof head + std::uint64_t{h.slot} * sizeof r);
  bool ok = false;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = path + ": not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    *why = path + ": owned by another user; refused";
  } else if (h.slot >= k_max_slots || st.st_size < at + static_cast<off_t>(sizeof r) ||
             ::pread(fd, &head, sizeof head, 0) != static_cast<ssize_t>(sizeof head) ||
             ::pread(fd, &r, sizeof r, at) != static_cast<ssize_t>(sizeof r)) {
    *why = path + ": no record " + std::to_string(h.slot);
  } else if (std::memcmp(head.magic, k_registry_magic, sizeof head.magic) != 0 ||
             head.version != k_registry_version || head.pid != h.pid || head.nonce != h.nonce) {
    *why = path + ": not a gmem IPC registry of this version";
  } else if (r.generation == 0 || r.generation != h.generation || r.offset != h.offset ||
             r.size != h.size) {
    *why = path + ": record " + std::to_string(h.slot) + " does not match the handle";
  } else {
    *segment = r.segment;
    ok = true;
  }
  ::close(fd);
  return ok;
}

// Importer side: each mapping once per (context, handle), counted. A mapping is the driver's
// (cuIpcOpenMemHandle of a segment's handle) or ours (the pieces of a block in another
// process's virtual-memory mappings, keyed by the gmem handle).
class imports {
public:
  // Opens `segment` in the current context, or counts one more reference to it.
  CUresult open(const CUipcMemHandle& segment, unsigned flags, CUdeviceptr* base) {
    CUcontext ctx = nullptr;
    (void)driver()->cuCtxGetCurrent(&ctx);
    std::lock_guard lock(mu_);
    if (counted_locked(ctx, segment, base)) return CUDA_SUCCESS;
    const CUresult r = GMEM_REAL(cuIpcOpenMemHandle_v2, base, segment, flags);
    if (r == CUDA_SUCCESS) maps_.push_back({ctx, segment, *base, 1, {}});
    return r;
  }
  // Maps the block `handle` (a gmem handle of a virtual-memory block of pid `h.pid`) in the
  // current context, or counts one more reference to it. `*base`: the mapping's start.
  CUresult open_vmm(const CUipcMemHandle& handle, const gmem_handle& h, CUdeviceptr* base,
                    std::string* why) {
    CUcontext ctx = nullptr;
    (void)driver()->cuCtxGetCurrent(&ctx);
    std::lock_guard lock(mu_); // held across the exchange: a second open waits for the first
    if (counted_locked(ctx, handle, base)) return CUDA_SUCCESS;
    ipc_vmm::published p;
    p.slot = h.slot;
    p.nonce = h.nonce;
    p.generation = h.generation;
    p.offset = h.offset;
    ipc_vmm::mapped m;
    const CUresult r = ipc_vmm::fetch_and_map(h.pid, p, h.size, &m, why);
    if (r != CUDA_SUCCESS) return r;
    *base = m.base;
    maps_.push_back({ctx, handle, m.base, 1, std::move(m)});
    return CUDA_SUCCESS;
  }
  // Records that `ptr` (base + offset) was handed out for the mapping at `base`.
  void hand_out(CUdeviceptr ptr, CUdeviceptr base) {
    std::lock_guard lock(mu_);
    ++pointers_[ptr].count;
    pointers_[ptr].base = base;
  }
  // True when `ptr` was handed out by open(); closes the mapping with its last reference.
  // `*r` is the driver's answer (CUDA_SUCCESS while references remain).
  bool close(CUdeviceptr ptr, CUresult* r) {
    std::lock_guard lock(mu_);
    auto it = pointers_.find(ptr);
    if (it == pointers_.end()) return false;
    const CUdeviceptr base = it->second.base;
    if (--it->second.count == 0) pointers_.erase(it);
    *r = CUDA_SUCCESS;
    for (auto m = maps_.begin(); m != maps_.end(); ++m) {
      if (m->base != base) continue;
      if (--m->refs == 0) {
        *r = m->vmm.base != 0 ? ipc_vmm::unmap(m->vmm) : GMEM_REAL(cuIpcCloseMemHandle, base);
        maps_.erase(m);
      }
      break;
    }
    return true;
  }

private:
  struct mapping {
    CUcontext ctx;
    CUipcMemHandle segment; // the driver's handle, or the gmem handle of a vmm block
    CUdeviceptr base;
    std::uint64_t refs;
    ipc_vmm::mapped vmm; // base 0: the driver's mapping
  };
  struct pointer {
    CUdeviceptr base = 0;
    std::uint64_t count = 0;
  };
  bool counted_locked(CUcontext ctx, const CUipcMemHandle& key, CUdeviceptr* base) {
    for (mapping& m : maps_) {
      if (m.ctx == ctx && same_bytes(m.segment, key)) {
        ++m.refs;
        *base = m.base;
        return true;
      }
    }
    return false;
  }
  std::mutex mu_; // held across the driver's open/close: neither calls back into these hooks
  std::vector<mapping> maps_;
  std::map<CUdeviceptr, pointer> pointers_;
};

imports& my_imports() {
  static auto* i = new imports;
  return *i;
}

// The handle of a live block in virtual-memory mappings (the arena, GMEM_VMM=1 segments): its
// physical pieces go to the importer as file descriptors (ipc_vmm.h).
CUresult vmm_handle(CUipcMemHandle* handle, context_entry& e, const block_info& b) {
  auto refuse = [&](const std::string& why) {
    static std::atomic<bool> warned{false};
    if (!warned.exchange(true)) {
      const std::string where = "warning: cuIpcGetMemHandle of pooled memory at " + hex(b.address) +
                                ": it lies in a virtual-memory mapping (the arena, GMEM_ARENA=1, "
                                "serves requests above GMEM_SMALL_MAX; GMEM_VMM=1 maps every "
                                "segment so) whose memory cannot be shared: ";
      warn(where + why +
           "; returning CUDA_ERROR_NOT_SUPPORTED. Run programs that share such blocks with "
           "GMEM_ARENA=0 GMEM_VMM=0 (gmem run --arena 0 --vmm 0)");
    }
    return CUDA_ERROR_NOT_SUPPORTED;
  };
  if (!e.vmm->exportable()) {
    return refuse("the device or driver cannot share it as POSIX file descriptors "
                  "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED is 0, or "
                  "cuMemCreate refused CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)");
  }
  vmm_upstream::piece_export first; // exporting one piece now: a refusal shows here, not later
  CUresult r;
  {
    hook_scope scope;
    ctx_scope ctx(e.link);
    r = e.vmm->export_pieces(b.address, b.size, 0, 1, first);
  }
  for (int fd : first.fds)
    ::close(fd);
  if (r != CUDA_SUCCESS) {
    return refuse("cuMemExportToShareableHandle failed (CUresult " + std::to_string(r) + ")");
  }
  ipc_vmm::published p;
  std::string why;
  if (!ipc_vmm::publish(&e, b.address, b.size, first.first, &p, &why)) {
    warn("error: cuIpcGetMemHandle of the pooled block at " + hex(b.address) +
         ": cannot offer it to importers (" + why + "); returning CUDA_ERROR_NOT_SUPPORTED");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  gmem_handle h{};
  std::memcpy(h.magic, k_vmm_handle_magic, sizeof h.magic);
  h.pid = static_cast<std::uint32_t>(::getpid());
  h.slot = p.slot;
  h.nonce = p.nonce;
  h.generation = p.generation;
  h.offset = p.offset;
  h.size = b.size;
  std::memcpy(handle, &h, sizeof h);
  return CUDA_SUCCESS;
}

} // namespace

CUresult ipc_get_handle(CUipcMemHandle* handle, CUdeviceptr p) {
  if (!shim_active() || driver() == nullptr || handle == nullptr)
    return GMEM_REAL(cuIpcGetMemHandle, handle, p);
  context_entry* e = pools().device_owner(p, pools().last_used());
  if (e == nullptr) return GMEM_REAL(cuIpcGetMemHandle, handle, p);
  const auto b = e->device_pool->find(p);
  if (!b) return CUDA_ERROR_INVALID_VALUE; // inside a segment, but no live block: freed memory
  if (e->vmm != nullptr && e->vmm->is_vmm(p)) return vmm_handle(handle, *e, *b);
  CUipcMemHandle segment{};
  CUresult r;
  {
    hook_scope scope;
    ctx_scope ctx(e->link);
    r = GMEM_REAL(cuIpcGetMemHandle, &segment, b->segment_base);
  }
  if (r != CUDA_SUCCESS) return r;
  if (b->address == b->segment_base) { // the driver's handle maps exactly this address
    *handle = segment;
    return CUDA_SUCCESS;
  }
  gmem_handle h{};
  std::string why;
  if (!my_exports().publish(segment, b->address - b->segment_base, b->size, &h.slot, &h.nonce,
                            &why)) {
    warn("error: cuIpcGetMemHandle of the pooled block at " + hex(b->address) +
         ": cannot record it for importers (" + why + "); returning CUDA_ERROR_NOT_SUPPORTED");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  std::memcpy(h.magic, k_handle_magic, sizeof h.magic);
  h.pid = static_cast<std::uint32_t>(::getpid());
  h.generation = my_exports().generation(h.slot);
  h.offset = b->address - b->segment_base;
  h.size = b->size;
  std::memcpy(handle, &h, sizeof h);
  return CUDA_SUCCESS;
}

CUresult ipc_open(CUdeviceptr* out, const CUipcMemHandle& handle, unsigned flags) {
  if (!shim_active() || driver() == nullptr || out == nullptr)
    return GMEM_REAL(cuIpcOpenMemHandle_v2, out, handle, flags);
  const std::uint32_t stack = trace::capture_stack();
  gmem_handle h{};
  std::memcpy(&h, &handle, sizeof h);
  CUipcMemHandle segment = handle;
  std::uint64_t offset = 0, size = 0;
  if (std::memcmp(h.magic, k_handle_magic, sizeof h.magic) == 0) {
    std::string why;
    if (!read_registry(h, &segment, &why)) {
      warn("error: cuIpcOpenMemHandle of a gmem handle (a pooled block of pid " +
           std::to_string(h.pid) + "): " + why + "; returning CUDA_ERROR_INVALID_HANDLE");
      return CUDA_ERROR_INVALID_HANDLE;
    }
    offset = h.offset;
    size = h.size;
  }
  CUdeviceptr base = 0;
  CUresult r;
  if (std::memcmp(h.magic, k_vmm_handle_magic, sizeof h.magic) == 0) {
    if (h.pid == static_cast<std::uint32_t>(::getpid())) {
      warn("error: cuIpcOpenMemHandle of a handle this process exported; returning "
           "CUDA_ERROR_INVALID_CONTEXT (as the driver does)");
      return CUDA_ERROR_INVALID_CONTEXT;
    }
    std::string why;
    {
      hook_scope scope;
      r = my_imports().open_vmm(handle, h, &base, &why);
    }
    if (r != CUDA_SUCCESS) {
      warn("error: cuIpcOpenMemHandle of a gmem handle (a pooled block of pid " +
           std::to_string(h.pid) + "): " + why + "; returning " +
           (r == CUDA_ERROR_INVALID_HANDLE ? std::string("CUDA_ERROR_INVALID_HANDLE")
                                           : "CUresult " + std::to_string(r)));
      return r;
    }
    offset = h.offset;
    size = h.size;
  } else {
    hook_scope scope;
    r = my_imports().open(segment, flags, &base);
  }
  if (r != CUDA_SUCCESS) return r;
  *out = base + offset;
  my_imports().hand_out(*out, base);
  count_passthrough(alloc_kind::ipc);
  trace::alloc(*out, size, size, current_device(), 0, alloc_kind::ipc, stack);
  return CUDA_SUCCESS;
}

CUresult ipc_close(CUdeviceptr p) {
  if (driver() == nullptr || forked_child()) return GMEM_REAL(cuIpcCloseMemHandle, p);
  CUresult r = CUDA_SUCCESS;
  trace::free(p, current_device(), 0, alloc_kind::ipc);
  if (my_imports().close(p, &r)) return r;
  return GMEM_REAL(cuIpcCloseMemHandle, p);
}

void ipc_at_exit() {
  my_exports().remove();
  ipc_vmm::at_exit();
}

void ipc_at_fork_child() {
  ipc_vmm::at_fork_child();
}

} // namespace gmem::shim
