#include "interpose/ipc/ipc_vmm.h"

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <pthread.h>
#include <random>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "interpose/real_call.h"
#include "interpose/upstream/vmm_upstream.h"

namespace gmem::shim::ipc_vmm {
namespace {

constexpr char k_request_magic[8] = {'g', 'm', 'e', 'm', 'I', 'P', 'C', 'q'};
constexpr char k_reply_magic[8] = {'g', 'm', 'e', 'm', 'I', 'P', 'C', 'a'};
constexpr std::uint32_t k_version = 1;
constexpr std::size_t k_batch = 200;              // descriptors per message (SCM_MAX_FD 253)
constexpr std::size_t k_max_slots = 65536;        // published blocks at a time
constexpr std::uint64_t k_max_pieces = 1u << 22;  // 64 TiB of 16 MiB pages
constexpr std::uint64_t k_max_bytes = 1ull << 50; // sanity bound on a block's mapping
constexpr int k_timeout_s = 5;                    // per send / receive, both sides

struct request {
  char magic[8];
  std::uint32_t version;
  std::uint32_t slot;
  std::uint64_t nonce;
  std::uint64_t generation;
  std::uint64_t reserved[4];
};
struct reply {
  char magic[8];
  std::uint32_t version;
  std::int32_t status; // CUresult; CUDA_SUCCESS: `count` pieces follow in batches
  std::uint64_t count;
  std::uint64_t total; // bytes of all pieces
  std::uint64_t offset;
  std::uint64_t size;
  std::uint64_t reserved[2];
};
struct batch { // one message, with bytes.size() descriptors attached
  std::uint32_t count;
  std::uint32_t reserved;
  std::uint64_t bytes[k_batch];
};
static_assert(sizeof(request) == 64 && sizeof(reply) == 64);
constexpr std::size_t k_batch_head = offsetof(batch, bytes);

std::string socket_name(std::uint32_t pid, std::uint64_t nonce) {
  char name[64];
  std::snprintf(name, sizeof name, "gmem-ipc.%u.%016llx", pid,
                static_cast<unsigned long long>(nonce));
  return name;
}

// The abstract address of `name` (no file: nothing to place or remove on the file system).
socklen_t abstract_address(const std::string& name, sockaddr_un* a) {
  std::memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  std::memcpy(a->sun_path + 1, name.data(), name.size()); // sun_path[0] = 0: abstract
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
}

void set_timeouts(int fd) {
  timeval tv{};
  tv.tv_sec = k_timeout_s;
  (void)::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void close_all(std::vector<int>& fds) { // -1: closed already
  for (int fd : fds)
    if (fd >= 0) ::close(fd);
  fds.clear();
}

// Sends one message with `fds` attached (none: a plain message).
bool send_msg(int sock, const void* data, std::size_t len, const std::vector<int>& fds) {
  iovec iov{const_cast<void*>(data), len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * k_batch)] = {};
  if (!fds.empty()) {
    if (fds.size() > k_batch) return false;
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(len);
}

// Receives one message into `data` (at most `len` bytes); every descriptor that came with it
// is appended to `fds` (the caller closes them, whatever happens). Returns its length, or -1
// (error, timeout, truncated message or control data); 0 when the peer closed.
ssize_t recv_msg(int sock, void* data, std::size_t len, std::vector<int>& fds) {
  iovec iov{data, len};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * k_batch) + 64];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return -1;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      if (fd >= 0) fds.push_back(fd);
    }
  }
  if ((msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0) return -1;
  return n;
}

// ---- exporter ----

struct record {
  context_entry* entry = nullptr;
  std::uintptr_t address = 0;
  std::size_t size = 0;
  std::uintptr_t first = 0;
  std::uint64_t generation = 0; // 0: unused
};

// The block of `r` is still live in its pool, at the same address and size.
bool live(const record& r) {
  if (r.entry == nullptr || r.entry->dropped()) return false;
  const auto b = r.entry->device_pool->find(r.address);
  return b && b->address == r.address && b->size == r.size;
}

void* serve(void*);

class server {
public:
  bool publish(context_entry* e, std::uintptr_t address, std::size_t size, std::uintptr_t first,
               published* out, std::string* why) {
    std::lock_guard lock(mu_);
    const auto me = static_cast<std::uint32_t>(::getpid());
    if (pid_ != me && !start(why)) return false;
    std::size_t slot = records_.size();
    for (std::size_t i = 0; i < records_.size(); ++i) {
      const record& r = records_[i];
      if (r.generation != 0 && r.entry == e && r.address == address && r.size == size &&
          r.first == first) {
        slot = i;
        break;
      }
    }
    if (slot == records_.size()) {
      if (records_.size() == k_max_slots) { // reuse the slot of a block freed since
        for (slot = 0; slot < records_.size() && live(records_[slot]); ++slot) {
        }
        if (slot == records_.size()) {
          *why = std::to_string(k_max_slots) + " exported blocks are live already";
          return false;
        }
      } else {
        records_.emplace_back();
      }
      records_[slot] = record{e, address, size, first, ++generation_};
    }
    out->slot = static_cast<std::uint32_t>(slot);
    out->nonce = nonce_;
    out->generation = records_[slot].generation;
    out->offset = address - first;
    return true;
  }

  // The record a request names, if the request is well formed and names one.
  bool lookup(const request& q, record* r) {
    std::lock_guard lock(mu_);
    if (std::memcmp(q.magic, k_request_magic, sizeof q.magic) != 0 || q.version != k_version ||
        q.nonce != nonce_ || q.slot >= records_.size() || q.generation == 0 ||
        records_[q.slot].generation != q.generation) {
      return false;
    }
    *r = records_[q.slot];
    return true;
  }

  int listener() const { return listen_.load(std::memory_order_acquire); }
  bool stopping() const { return stopping_.load(std::memory_order_acquire); }

  void stop() {
    stopping_.store(true, std::memory_order_release);
    const int fd = listen_.load(std::memory_order_acquire);
    // Wakes the server's accept(); the descriptor (and with it the name) goes at exit, so the
    // thread never sees a number reused by the program. Only the owner: a forked child shares
    // the socket, and shutting it down there would stop the parent's server too (the fork
    // handler closes the child's copy, but the pid is checked all the same).
    if (fd >= 0 && owner_.load(std::memory_order_acquire) == ::getpid())
      (void)::shutdown(fd, SHUT_RDWR);
  }
  void forked_child() { // no lock: another thread may have held it at fork()
    const int fd = listen_.exchange(-1);
    if (fd >= 0) ::close(fd);
    stopping_.store(true, std::memory_order_release);
  }

private:
  // Binds this process's socket and starts the thread that serves it (under mu_).
  bool start(std::string* why) {
    if (stopping()) {
      *why = "the process is exiting";
      return false;
    }
    const auto me = static_cast<std::uint32_t>(::getpid());
    std::random_device rd;
    const std::uint64_t nonce = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
    const std::string name = socket_name(me, nonce);
    const int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    const socklen_t len = abstract_address(name, &a);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 64) != 0) {
      *why = "Unix socket @" + name + ": " + std::strerror(errno);
      if (fd >= 0) ::close(fd);
      return false;
    }
    // The thread takes no signals: the program's handlers run on its own threads.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    listen_.store(fd, std::memory_order_release);
    const int rc = pthread_create(&thread, &attr, &serve, nullptr);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    if (rc != 0) {
      listen_.store(-1, std::memory_order_release);
      ::close(fd);
      *why = std::string("cannot start the IPC server thread: ") + std::strerror(rc);
      return false;
    }
    pid_ = me;
    owner_.store(static_cast<pid_t>(me), std::memory_order_release);
    nonce_ = nonce;
    records_.clear(); // a forked child's copy (never served)
    return true;
  }

  std::mutex mu_;
  std::uint32_t pid_ = 0; // whose socket: a forked child starts its own
  std::uint64_t nonce_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<record> records_;
  std::atomic<int> listen_{-1};
  std::atomic<pid_t> owner_{0}; // pid_, for stop() (no lock at exit)
  std::atomic<bool> stopping_{false};
};

server& the_server() {
  static auto* s = new server; // never destroyed: the thread and hooks run during exit
  return *s;
}

void send_status(int sock, CUresult status) {
  reply a{};
  std::memcpy(a.magic, k_reply_magic, sizeof a.magic);
  a.version = k_version;
  a.status = static_cast<std::int32_t>(status);
  (void)send_msg(sock, &a, sizeof a, {});
}

// One connection: request, header, the pieces in batches.
void serve_one(int sock) {
  set_timeouts(sock);
  ucred peer{};
  socklen_t len = sizeof peer;
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0 || peer.uid != ::geteuid()) {
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      std::fprintf(stderr,
                   "gmem: warning: CUDA IPC: refused a connection from uid %d (pid %d): only "
                   "processes of uid %d may import this process's memory\n",
                   static_cast<int>(peer.uid), static_cast<int>(peer.pid),
                   static_cast<int>(::geteuid()));
    }
    return;
  }
  request q{};
  std::vector<int> junk; // descriptors a client should not send
  const ssize_t n = recv_msg(sock, &q, sizeof q, junk);
  close_all(junk);
  if (n != static_cast<ssize_t>(sizeof q)) return;
  record r;
  if (!the_server().lookup(q, &r)) {
    send_status(sock, CUDA_ERROR_INVALID_HANDLE);
    return;
  }
  if (exiting() || forked_child() || !live(r) || r.entry->vmm == nullptr) {
    send_status(sock, CUDA_ERROR_INVALID_VALUE); // freed (or its context is gone)
    return;
  }
  vmm_upstream& up = *r.entry->vmm;
  vmm_upstream::piece_export first;
  vmm_upstream::piece_export pe;
  CUresult rc;
  {
    ctx_scope ctx(r.entry->link);
    rc = up.export_pieces(r.address, r.size, 0, k_batch, first);
  }
  if (rc != CUDA_SUCCESS || first.first != r.first) {
    close_all(first.fds);
    send_status(sock, rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE);
    return;
  }
  reply a{};
  std::memcpy(a.magic, k_reply_magic, sizeof a.magic);
  a.version = k_version;
  a.status = CUDA_SUCCESS;
  a.count = first.count;
  a.total = first.total;
  a.offset = r.address - r.first;
  a.size = r.size;
  bool ok = send_msg(sock, &a, sizeof a, {});
  std::size_t sent = 0;
  pe = std::move(first);
  while (ok) {
    batch b{};
    b.count = static_cast<std::uint32_t>(pe.fds.size());
    for (std::size_t i = 0; i < pe.bytes.size(); ++i)
      b.bytes[i] = pe.bytes[i];
    ok = !pe.fds.empty() && send_msg(sock, &b, k_batch_head + pe.fds.size() * 8, pe.fds);
    sent += pe.fds.size();
    close_all(pe.fds);
    if (!ok || sent >= a.count) break;
    vmm_upstream::piece_export next;
    {
      ctx_scope ctx(r.entry->link);
      rc = up.export_pieces(r.address, r.size, sent, k_batch, next);
    }
    // The block was freed and its memory remapped meanwhile: stop (the importer sees a short
    // answer and fails).
    ok = rc == CUDA_SUCCESS && next.first == r.first && next.count == a.count &&
         next.total == a.total;
    pe = std::move(next);
  }
  close_all(pe.fds);
}

void* serve(void*) {
  hook_scope in_hook; // the driver calls made here never enter the hooks
  server& s = the_server();
  for (;;) {
    const int fd = s.listener();
    if (fd < 0 || s.stopping()) return nullptr;
    const int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) {
      if (s.stopping()) return nullptr;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        const timespec pause{0, 50 * 1000 * 1000};
        ::nanosleep(&pause, nullptr);
        continue;
      }
      return nullptr;
    }
    serve_one(c);
    ::close(c);
  }
}

} // namespace

bool publish(context_entry* e, std::uintptr_t address, std::size_t size, std::uintptr_t first,
             published* out, std::string* why) {
  return the_server().publish(e, address, size, first, out, why);
}

void at_exit() {
  the_server().stop();
}

void at_fork_child() {
  the_server().forked_child();
}

// ---- importer ----

CUresult unmap(const mapped& m) {
  const real_driver& r = *driver();
  CUresult first = CUDA_SUCCESS;
  for (const auto& [va, bytes] : m.pieces) {
    const CUresult rc = r.cuMemUnmap(va, bytes);
    if (first == CUDA_SUCCESS) first = rc;
  }
  if (m.base != 0) {
    const CUresult rc = r.cuMemAddressFree(m.base, m.total);
    if (first == CUDA_SUCCESS) first = rc;
  }
  return first;
}

namespace {

struct socket_fd {
  int fd = -1;
  ~socket_fd() {
    if (fd >= 0) ::close(fd);
  }
};

bool has_vmm_import(const real_driver& r) {
  return r.cuMemImportFromShareableHandle != nullptr && r.cuMemAddressReserve != nullptr &&
         r.cuMemAddressFree != nullptr && r.cuMemMap != nullptr && r.cuMemUnmap != nullptr &&
         r.cuMemSetAccess != nullptr && r.cuMemRelease != nullptr && r.cuCtxGetDevice != nullptr;
}

} // namespace

CUresult fetch_and_map(std::uint32_t pid, const published& p, std::uint64_t size, mapped* out,
                       std::string* why) {
  const real_driver& r = *driver();
  if (!has_vmm_import(r)) {
    *why = "this driver cannot import shareable memory handles";
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  CUdevice device = 0;
  if (r.cuCtxGetDevice(&device) != CUDA_SUCCESS) {
    *why = "no current context";
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  const std::string name = socket_name(pid, p.nonce);
  socket_fd s;
  s.fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  const socklen_t len = abstract_address(name, &a);
  if (s.fd < 0) {
    *why = std::string("socket: ") + std::strerror(errno);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  set_timeouts(s.fd);
  int rc;
  do {
    rc = ::connect(s.fd, reinterpret_cast<sockaddr*>(&a), len);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    *why = "cannot reach the exporter's socket @" + name + " (" + std::strerror(errno) +
           "): the exporting process has exited, or runs in another network namespace";
    return CUDA_ERROR_INVALID_HANDLE;
  }
  ucred peer{};
  socklen_t peer_len = sizeof peer;
  if (::getsockopt(s.fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0 ||
      peer.pid != static_cast<pid_t>(pid) || peer.uid != ::geteuid()) {
    *why = "the socket @" + name + " belongs to pid " + std::to_string(peer.pid) + " uid " +
           std::to_string(peer.uid) + ", not to the exporter (pid " + std::to_string(pid) +
           ", uid " + std::to_string(::geteuid()) + "); refused";
    return CUDA_ERROR_INVALID_HANDLE;
  }
  request q{};
  std::memcpy(q.magic, k_request_magic, sizeof q.magic);
  q.version = k_version;
  q.slot = p.slot;
  q.nonce = p.nonce;
  q.generation = p.generation;
  if (!send_msg(s.fd, &q, sizeof q, {})) {
    *why = std::string("sending the request: ") + std::strerror(errno);
    return CUDA_ERROR_INVALID_HANDLE;
  }
  std::vector<int> fds; // every descriptor received and not yet closed
  reply head{};
  const ssize_t n = recv_msg(s.fd, &head, sizeof head, fds);
  const bool stray = !fds.empty();
  close_all(fds);
  if (n != static_cast<ssize_t>(sizeof head) || stray ||
      std::memcmp(head.magic, k_reply_magic, sizeof head.magic) != 0 || head.version != k_version) {
    *why = n == 0 ? "the exporter closed the connection without an answer"
                  : "no valid answer from the exporter";
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (head.status == CUDA_ERROR_INVALID_HANDLE) {
    *why = "the exporter does not know this handle (forged, or of an earlier run)";
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (head.status == CUDA_ERROR_INVALID_VALUE) {
    *why = "the block is no longer allocated in the exporter";
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (head.status != CUDA_SUCCESS) {
    *why = "the exporter's driver could not export the memory (CUresult " +
           std::to_string(head.status) + ")";
    return static_cast<CUresult>(head.status);
  }
  if (head.count == 0 || head.count > k_max_pieces || head.total == 0 || head.total > k_max_bytes ||
      head.offset != p.offset || head.size != size || head.offset > head.total ||
      head.size > head.total - head.offset) {
    *why = "the exporter's answer does not match the handle";
    return CUDA_ERROR_INVALID_HANDLE;
  }
  mapped m;
  m.total = head.total;
  CUresult drv = r.cuMemAddressReserve(&m.base, m.total, 0, 0, 0);
  if (drv != CUDA_SUCCESS) {
    m.base = 0;
    *why = "cuMemAddressReserve of " + std::to_string(m.total) + " bytes failed";
    return drv;
  }
  auto fail = [&](CUresult result, const std::string& text) {
    close_all(fds);
    (void)unmap(m);
    *why = text;
    return result;
  };
  std::size_t offset = 0;
  while (m.pieces.size() < head.count) {
    batch b{};
    const ssize_t got = recv_msg(s.fd, &b, sizeof b, fds);
    if (got < static_cast<ssize_t>(k_batch_head) || b.count == 0 || b.count > k_batch ||
        static_cast<std::size_t>(got) != k_batch_head + b.count * 8 || fds.size() != b.count ||
        m.pieces.size() + b.count > head.count) {
      return fail(CUDA_ERROR_INVALID_HANDLE,
                  got == 0 ? "the exporter closed the connection early (the block was freed?)"
                           : "a malformed answer from the exporter");
    }
    for (std::size_t i = 0; i < b.count; ++i) {
      const std::uint64_t bytes = b.bytes[i];
      if (bytes == 0 || bytes > m.total - offset) {
        return fail(CUDA_ERROR_INVALID_HANDLE, "the exporter's pieces do not add up");
      }
      CUmemGenericAllocationHandle h = 0;
      drv = r.cuMemImportFromShareableHandle(
          &h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fds[i])),
          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      ::close(fds[i]);
      fds[i] = -1;
      if (drv != CUDA_SUCCESS) {
        return fail(drv,
                    "cuMemImportFromShareableHandle failed (CUresult " + std::to_string(drv) + ")");
      }
      drv = r.cuMemMap(m.base + offset, bytes, 0, h, 0);
      (void)r.cuMemRelease(h); // the mapping keeps the memory
      if (drv != CUDA_SUCCESS) {
        return fail(drv, "cuMemMap failed (CUresult " + std::to_string(drv) + ")");
      }
      m.pieces.emplace_back(m.base + offset, bytes);
      offset += bytes;
    }
    fds.clear(); // all closed above
  }
  if (offset != m.total)
    return fail(CUDA_ERROR_INVALID_HANDLE, "the exporter's pieces do not add up");
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if ((drv = r.cuMemSetAccess(m.base, m.total, &access, 1)) != CUDA_SUCCESS) {
    return fail(drv, "cuMemSetAccess for device " + std::to_string(device) + " failed (CUresult " +
                         std::to_string(drv) + ")");
  }
  *out = std::move(m);
  return CUDA_SUCCESS;
}

} // namespace gmem::shim::ipc_vmm
