// CUDA IPC between two processes over the fake driver, linked with -lcuda (the fake).
//   ipc_probe export gmem|plain|native: allocates six blocks: three that share one pooled
//     segment (0 at its start, 1 and 2 inside it), a 64 MiB buffer (3: from the arena with the
//     default options) and two 3 MiB blocks (4 and 5: one arena page, 5 inside it), fills each
//     with its own byte, exports all (twice for 1 and 3: the handle must be the same), forks
//     a child that exits at once (it must not take the exporter's socket along), then runs
//     `ipc_probe import FILE MODE` with the shim preloaded (gmem) or not (plain; native: neither
//     process under gmem, the reference), and checks what the importer wrote back.
//   ipc_probe import FILE MODE: opens the handles, checks each block's bytes (a wrong address
//     reads another block's), closes and reopens 1, 3 and 5, opens 4 twice, writes 0x44 into
//     1, 0x55 into 2, 0x99 into 3 and 0xAA into 5, closes all. Without gmem the handles of
//     1 and 2 must fail to open, and any other block that opens must read right (never a
//     wrong pointer); under gmem a forged handle (slot, nonce, generation) must fail.
//   ipc_probe export-only FILE: exports the six blocks to FILE and exits (the handles outlive
//     their exporter).
//   ipc_probe import-gone FILE: opens block 3 of FILE, which must fail (its exporter is gone,
//     or the socket is not the exporter's).
//   ipc_probe squat FILE: binds the socket name of the (exited) exporter of FILE itself, then
//     runs `import-gone FILE` (under gmem if preloaded): the importer must refuse this peer.
//   ipc_probe export-big: one 450 MiB block (run with GMEM_ARENA_PAGE_MB=2: 225 arena pages,
//     more than one message of descriptors), a marker byte every 2 MiB, exported to
//     `import-big FILE`, which checks every marker (pieces mapped in order) and writes its
//     own at the end.
// Prints "ipc ..." lines; exit 0 ok, 1 a check failed, 2 setup.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <fcntl.h>
#include <spawn.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace {

int g_failures = 0;
#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::printf("FAIL: " __VA_ARGS__);                                                           \
      std::printf("\n");                                                                           \
      ++g_failures;                                                                                \
    }                                                                                              \
  } while (0)

constexpr int k_blocks = 6;
// 0-2: one 2 MiB segment; 3: above GMEM_SMALL_MAX (the arena by default); 4, 5: one arena page.
constexpr std::size_t k_sizes[k_blocks] = {512 << 10, 512 << 10, 256 << 10, std::size_t{64} << 20,
                                           3 << 20,   3 << 20};
constexpr unsigned char k_fill[k_blocks] = {0x11, 0x22, 0x33, 0x66, 0x77, 0x88};
constexpr std::size_t k_arena_page = std::size_t{16} << 20; // GMEM_ARENA_PAGE_MB's default

bool setup() {
  CUcontext ctx = nullptr;
  return cuInit(0) == CUDA_SUCCESS && cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS &&
         cuCtxSetCurrent(ctx) == CUDA_SUCCESS;
}

unsigned char byte_at(CUdeviceptr p, std::size_t offset) {
  unsigned char b = 0;
  if (cuMemcpyDtoH(&b, p + offset, 1) != CUDA_SUCCESS) return 0;
  return b;
}

bool allocate(CUdeviceptr* p) {
  for (int i = 0; i < k_blocks; ++i) {
    CHECK(cuMemAlloc(&p[i], k_sizes[i]) == CUDA_SUCCESS, "cuMemAlloc %d", i);
    CHECK(cuMemsetD8(p[i], k_fill[i], k_sizes[i]) == CUDA_SUCCESS, "cuMemsetD8 %d", i);
  }
  std::printf("ipc export same_page=%d\n", p[4] / k_arena_page == p[5] / k_arena_page ? 1 : 0);
  return g_failures == 0;
}

bool export_all(const CUdeviceptr* p, CUipcMemHandle* h) {
  CUipcMemHandle again{};
  for (int i = 0; i < k_blocks; ++i) {
    const CUresult r = cuIpcGetMemHandle(&h[i], p[i]);
    std::printf("ipc export block=%d rc=%d\n", i, r);
    CHECK(r == CUDA_SUCCESS, "cuIpcGetMemHandle of block %d: %d", i, r);
  }
  for (int i : {1, 3}) {
    CHECK(cuIpcGetMemHandle(&again, p[i]) == CUDA_SUCCESS &&
              std::memcmp(&again, &h[i], sizeof again) == 0,
          "a second export of block %d gave another handle", i);
  }
  return g_failures == 0;
}

bool write_file(const char* path, const CUipcMemHandle* h) {
  FILE* f = std::fopen(path, "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(h, sizeof(CUipcMemHandle), k_blocks, f) == k_blocks;
  return std::fclose(f) == 0 && ok;
}

bool read_file(const char* path, CUipcMemHandle* h) {
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr) return false;
  const bool ok = std::fread(h, sizeof(CUipcMemHandle), k_blocks, f) == k_blocks;
  std::fclose(f);
  return ok;
}

// Runs `self args...` with this environment (without LD_PRELOAD when `plain`); its exit status.
int spawn(const char* self, std::vector<std::string> args, bool plain) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (!plain || std::strncmp(*e, "LD_PRELOAD=", 11) != 0) env.push_back(*e);
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  args.insert(args.begin(), self);
  std::vector<char*> argv;
  for (auto& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout);
  pid_t pid = 0;
  if (posix_spawn(&pid, self, nullptr, nullptr, argv.data(), envp.data()) != 0) return -1;
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

int run_export(const char* mode, const char* self) {
  std::printf("ipc export pid=%d\n", static_cast<int>(getpid()));
  CUdeviceptr p[k_blocks] = {};
  CUipcMemHandle h[k_blocks] = {};
  if (!allocate(p)) return 1;
  (void)export_all(p, h);
  std::fflush(stdout);
  if (const pid_t child = fork(); child == 0) { // a forked child's exit: the socket stays served
    std::exit(0);
  } else if (child > 0) {
    waitpid(child, nullptr, 0);
  }
  char path[] = "/tmp/gmem-ipc-probe.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return 2;
  close(fd);
  if (!write_file(path, h)) return 2;
  const bool plain = std::strcmp(mode, "plain") == 0;
  const int status = spawn(self, {"import", path, mode}, plain);
  unlink(path);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "importer exit status %d", status);
  if (!plain) {
    CHECK(byte_at(p[1], 0) == 0x44 && byte_at(p[1], k_sizes[1] - 1) == 0x44,
          "the importer's write to block 1 did not land in block 1");
    CHECK(byte_at(p[2], 0) == 0x55, "the importer's write to block 2 did not land in block 2");
    CHECK(byte_at(p[3], 0) == 0x99 && byte_at(p[3], k_sizes[3] - 1) == 0x99,
          "the importer's write to block 3 did not land in block 3");
    CHECK(byte_at(p[5], 0) == 0xAA && byte_at(p[5], k_sizes[5] - 1) == 0xAA,
          "the importer's write to block 5 did not land in block 5");
  }
  for (int i : {0, 4}) {
    CHECK(byte_at(p[i], 0) == k_fill[i] && byte_at(p[i], k_sizes[i] - 1) == k_fill[i],
          "block %d was overwritten by a write meant for another block", i);
  }
  for (int i = 0; i < k_blocks; ++i)
    CHECK(cuMemFree(p[i]) == CUDA_SUCCESS, "cuMemFree %d", i);
  std::printf("ipc export done failures=%d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

int run_export_only(const char* path) {
  CUdeviceptr p[k_blocks] = {};
  CUipcMemHandle h[k_blocks] = {};
  if (!allocate(p) || !export_all(p, h) || !write_file(path, h)) return 1;
  std::printf("ipc export-only pid=%d\n", static_cast<int>(getpid()));
  return 0; // the blocks stay allocated: the exporter exits with them
}

int open_fds() {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd)
    n += fcntl(fd, F_GETFD) != -1 ? 1 : 0;
  return n;
}

bool opens_right(int i, CUdeviceptr q) {
  return byte_at(q, 0) == k_fill[i] && byte_at(q, k_sizes[i] - 1) == k_fill[i];
}

int run_import(const char* path, const char* mode) {
  CUipcMemHandle h[k_blocks] = {};
  if (!read_file(path, h)) return 2;
  const bool plain = std::strcmp(mode, "plain") == 0; // gmem or native: every block opens
  const int fds_before = open_fds();
  CUdeviceptr p[k_blocks] = {};
  for (int i = 0; i < k_blocks; ++i) {
    const CUresult r = cuIpcOpenMemHandle(&p[i], h[i], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    std::printf("ipc import block=%d rc=%d first=0x%02x\n", i, r,
                r == CUDA_SUCCESS ? byte_at(p[i], 0) : 0);
    if (plain && (i == 1 || i == 2)) { // a block inside a segment: the driver alone refuses it
      CHECK(r != CUDA_SUCCESS, "without gmem, the handle of block %d opened (0x%llx)", i,
            static_cast<unsigned long long>(p[i]));
      continue;
    }
    if (plain && r != CUDA_SUCCESS) continue; // gmem handles of arena blocks: refused too
    CHECK(r == CUDA_SUCCESS, "cuIpcOpenMemHandle of block %d: %d", i, r);
    if (r != CUDA_SUCCESS) continue;
    CHECK(opens_right(i, p[i]), "block %d reads 0x%02x: a wrong address", i, byte_at(p[i], 0));
  }
  if (std::strcmp(mode, "gmem") == 0) { // forged gmem handles: refused, never mapped
    for (int block : {1, 3, 5}) {
      if (std::memcmp(h[block].reserved, "gmemIPC", 7) != 0) continue; // the driver's handle
      for (int field : {12, 16, 24}) { // the slot, the nonce, the generation (ipc_sharing.cpp)
        CUipcMemHandle forged = h[block];
        forged.reserved[field] = static_cast<char>(forged.reserved[field] ^ 0x5A);
        CUdeviceptr q = 0;
        const CUresult r = cuIpcOpenMemHandle(&q, forged, 0);
        std::printf("ipc import block=%d forged=%d rc=%d\n", block, field, r);
        CHECK(r != CUDA_SUCCESS, "a forged handle of block %d (byte %d) opened", block, field);
      }
    }
  }
  if (!plain) {
    for (int i : {1, 3, 5}) { // close and reopen
      CHECK(cuIpcCloseMemHandle(p[i]) == CUDA_SUCCESS, "close block %d", i);
      CUdeviceptr q = 0;
      CHECK(cuIpcOpenMemHandle(&q, h[i], 0) == CUDA_SUCCESS && opens_right(i, q), "reopen block %d",
            i);
      p[i] = q;
    }
    CHECK(byte_at(p[2], 0) == 0x33, "block 2 unreadable after block 1 was closed");
    if (std::strcmp(mode, "gmem") == 0) { // a second open: counted, the same pointer (the
      CUdeviceptr twice = 0;              // driver may refuse it: ALREADY_MAPPED in the fake)
      CHECK(cuIpcOpenMemHandle(&twice, h[4], 0) == CUDA_SUCCESS && twice == p[4],
            "a second open of block 4 gave 0x%llx, not 0x%llx",
            static_cast<unsigned long long>(twice), static_cast<unsigned long long>(p[4]));
      CHECK(cuIpcCloseMemHandle(twice) == CUDA_SUCCESS && opens_right(4, p[4]),
            "block 4 unreadable after one of its two opens was closed");
    }
    CHECK(cuMemsetD8(p[1], 0x44, k_sizes[1]) == CUDA_SUCCESS, "write block 1");
    CHECK(cuMemsetD8(p[2], 0x55, 1) == CUDA_SUCCESS, "write block 2");
    CHECK(cuMemsetD8(p[3], 0x99, k_sizes[3]) == CUDA_SUCCESS, "write block 3");
    CHECK(cuMemsetD8(p[5], 0xAA, k_sizes[5]) == CUDA_SUCCESS, "write block 5");
    CHECK(opens_right(4, p[4]), "block 4 changed by the write to block 5 (same page)");
    for (int i = 0; i < k_blocks; ++i)
      CHECK(cuIpcCloseMemHandle(p[i]) == CUDA_SUCCESS, "close block %d", i);
    for (int i : {1, 3, 4})
      CHECK(cuIpcCloseMemHandle(p[i]) != CUDA_SUCCESS, "a second close of block %d succeeded", i);
  } else {
    for (int i = 0; i < k_blocks; ++i)
      if (p[i] != 0) CHECK(cuIpcCloseMemHandle(p[i]) == CUDA_SUCCESS, "close block %d", i);
  }
  const int fds_after = open_fds();
  std::printf("ipc import fds_before=%d fds_after=%d\n", fds_before, fds_after);
  CHECK(fds_after == fds_before, "descriptors left open: %d before, %d after", fds_before,
        fds_after);
  std::printf("ipc import done failures=%d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

int run_import_gone(const char* path) {
  CUipcMemHandle h[k_blocks] = {};
  if (!read_file(path, h)) return 2;
  CUdeviceptr q = 0;
  const CUresult r = cuIpcOpenMemHandle(&q, h[3], 0);
  std::printf("ipc import-gone rc=%d\n", r);
  CHECK(r != CUDA_SUCCESS, "the handle of an exited exporter opened (0x%llx)",
        static_cast<unsigned long long>(q));
  return g_failures == 0 ? 0 : 1;
}

// Binds the exporter's socket name (ipc_vmm.cpp: abstract "gmem-ipc.PID.NONCE"), as a hostile
// process could after the exporter exited, and lets an importer try the handle.
int run_squat(const char* path, const char* self) {
  CUipcMemHandle h[k_blocks] = {};
  if (!read_file(path, h)) return 2;
  std::uint32_t pid = 0;
  std::uint64_t nonce = 0;
  std::memcpy(&pid, h[3].reserved + 8, sizeof pid);
  std::memcpy(&nonce, h[3].reserved + 16, sizeof nonce);
  char name[64];
  std::snprintf(name, sizeof name, "gmem-ipc.%u.%016llx", pid,
                static_cast<unsigned long long>(nonce));
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path + 1, name, std::strlen(name));
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(name));
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd, 4) != 0) {
    std::printf("FAIL: cannot bind @%s\n", name);
    return 2;
  }
  std::printf("ipc squat @%s\n", name);
  const int status = spawn(self, {"import-gone", path}, false);
  close(fd);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "importer exit status %d", status);
  return g_failures == 0 ? 0 : 1;
}

constexpr std::size_t k_big = std::size_t{450} << 20;
constexpr std::size_t k_stride = std::size_t{2} << 20;

unsigned char marker(std::size_t k) {
  return static_cast<unsigned char>((k * 37 + 11) & 0xff);
}

int run_export_big(const char* self) {
  CUdeviceptr p = 0;
  if (cuMemAlloc(&p, k_big) != CUDA_SUCCESS) return 2;
  for (std::size_t k = 0; k < k_big / k_stride; ++k)
    CHECK(cuMemsetD8(p + k * k_stride, marker(k), 1) == CUDA_SUCCESS, "marker %zu", k);
  CUipcMemHandle h[k_blocks] = {};
  const CUresult r = cuIpcGetMemHandle(&h[0], p);
  std::printf("ipc export-big rc=%d\n", r);
  CHECK(r == CUDA_SUCCESS, "cuIpcGetMemHandle of the big block: %d", r);
  char path[] = "/tmp/gmem-ipc-probe.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return 2;
  close(fd);
  if (!write_file(path, h)) return 2;
  const int status = spawn(self, {"import-big", path}, false);
  unlink(path);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "importer exit status %d", status);
  CHECK(byte_at(p, k_big - 1) == 0xEE, "the importer's write did not land at the block's end");
  CHECK(cuMemFree(p) == CUDA_SUCCESS, "cuMemFree");
  std::printf("ipc export-big done failures=%d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

int run_import_big(const char* path) {
  CUipcMemHandle h[k_blocks] = {};
  if (!read_file(path, h)) return 2;
  CUdeviceptr q = 0;
  const CUresult r = cuIpcOpenMemHandle(&q, h[0], 0);
  CHECK(r == CUDA_SUCCESS, "cuIpcOpenMemHandle of the big block: %d", r);
  if (r != CUDA_SUCCESS) return 1;
  std::size_t wrong = 0;
  for (std::size_t k = 0; k < k_big / k_stride; ++k)
    wrong += byte_at(q + k * k_stride, 0) != marker(k) ? 1 : 0;
  std::printf("ipc import-big markers_wrong=%zu\n", wrong);
  CHECK(wrong == 0, "%zu of the markers read wrong", wrong);
  CHECK(cuMemsetD8(q + k_big - 1, 0xEE, 1) == CUDA_SUCCESS, "write at the end");
  CHECK(cuIpcCloseMemHandle(q) == CUDA_SUCCESS, "close");
  return g_failures == 0 ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
  if (!setup()) {
    std::printf("FAIL: driver setup\n");
    return 2;
  }
  if (argc == 3 && std::strcmp(argv[1], "export") == 0) return run_export(argv[2], argv[0]);
  if (argc == 4 && std::strcmp(argv[1], "import") == 0) return run_import(argv[2], argv[3]);
  if (argc == 3 && std::strcmp(argv[1], "export-only") == 0) return run_export_only(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "import-gone") == 0) return run_import_gone(argv[2]);
  if (argc == 3 && std::strcmp(argv[1], "squat") == 0) return run_squat(argv[2], argv[0]);
  if (argc == 2 && std::strcmp(argv[1], "export-big") == 0) return run_export_big(argv[0]);
  if (argc == 3 && std::strcmp(argv[1], "import-big") == 0) return run_import_big(argv[2]);
  std::fprintf(stderr, "usage: ipc_probe export MODE | import FILE MODE (gmem, plain, native) | "
                       "export-only FILE | import-gone FILE | squat FILE | export-big | "
                       "import-big FILE\n");
  return 2;
}
