// CUDA IPC between two processes over the fake driver, linked with -lcuda (the fake).
//   ipc_probe export gmem|plain|native: allocates three blocks that share one pooled
//     segment (A at its start, B and C inside it), fills them (0x11, 0x22, 0x33), exports all
//     three (twice for B: the handle must be the same), then runs `ipc_probe import FILE`
//     with the shim preloaded (gmem) or not (plain; native: neither process under gmem, the
//     reference), and checks what the importer wrote back.
//   ipc_probe import FILE: opens the handles, checks each block's bytes (a wrong address reads
//     another block's), closes and reopens B, writes 0x44 into B and 0x55 into C, closes all.
//     Without gmem the handles of B and C must fail to open (never a wrong pointer); under gmem
//     a handle whose registry record does not match (forged slot, nonce) must fail too.
// Prints "ipc ..." lines; exit 0 ok, 1 a check failed, 2 setup.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda.h>
#include <spawn.h>
#include <string>
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

constexpr std::size_t k_sizes[3] = {512 << 10, 512 << 10, 256 << 10}; // one 2 MiB segment
constexpr unsigned char k_fill[3] = {0x11, 0x22, 0x33};

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

int run_export(const char* mode, const char* self) {
  std::printf("ipc export pid=%d\n", static_cast<int>(getpid()));
  CUdeviceptr p[3] = {};
  for (int i = 0; i < 3; ++i) {
    CHECK(cuMemAlloc(&p[i], k_sizes[i]) == CUDA_SUCCESS, "cuMemAlloc %d", i);
    CHECK(cuMemsetD8(p[i], k_fill[i], k_sizes[i]) == CUDA_SUCCESS, "cuMemsetD8 %d", i);
  }
  CUipcMemHandle h[3] = {}, again{};
  for (int i = 0; i < 3; ++i) {
    const CUresult r = cuIpcGetMemHandle(&h[i], p[i]);
    std::printf("ipc export block=%d rc=%d\n", i, r);
    CHECK(r == CUDA_SUCCESS, "cuIpcGetMemHandle of block %d: %d", i, r);
  }
  CHECK(cuIpcGetMemHandle(&again, p[1]) == CUDA_SUCCESS &&
            std::memcmp(&again, &h[1], sizeof again) == 0,
        "a second export of block 1 gave another handle");
  char path[] = "/tmp/gmem-ipc-probe.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0 || write(fd, h, sizeof h) != static_cast<ssize_t>(sizeof h)) return 2;
  close(fd);
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strcmp(mode, "plain") != 0 || std::strncmp(*e, "LD_PRELOAD=", 11) != 0)
      env.push_back(*e);
  std::vector<char*> envp;
  for (auto& e : env)
    envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string a0 = self, a1 = "import", a2 = path, a3 = mode;
  char* argv[] = {a0.data(), a1.data(), a2.data(), a3.data(), nullptr};
  std::fflush(stdout);
  pid_t pid = 0;
  if (posix_spawn(&pid, self, nullptr, nullptr, argv, envp.data()) != 0) return 2;
  int status = 0;
  waitpid(pid, &status, 0);
  unlink(path);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "importer exit status %d", status);
  if (std::strcmp(mode, "plain") != 0) {
    CHECK(byte_at(p[1], 0) == 0x44 && byte_at(p[1], k_sizes[1] - 1) == 0x44,
          "the importer's write to block 1 did not land in block 1");
    CHECK(byte_at(p[2], 0) == 0x55, "the importer's write to block 2 did not land in block 2");
  }
  CHECK(byte_at(p[0], 0) == 0x11 && byte_at(p[0], k_sizes[0] - 1) == 0x11,
        "block 0 was overwritten by a write meant for another block");
  for (int i = 0; i < 3; ++i)
    CHECK(cuMemFree(p[i]) == CUDA_SUCCESS, "cuMemFree %d", i);
  std::printf("ipc export done failures=%d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

int run_import(const char* path, const char* mode) {
  CUipcMemHandle h[3] = {};
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr || std::fread(h, sizeof h, 1, f) != 1) return 2;
  std::fclose(f);
  const bool gmem = std::strcmp(mode, "plain") != 0; // gmem or native: every block opens
  CUdeviceptr p[3] = {};
  for (int i = 0; i < 3; ++i) {
    const CUresult r = cuIpcOpenMemHandle(&p[i], h[i], CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    std::printf("ipc import block=%d rc=%d first=0x%02x\n", i, r,
                r == CUDA_SUCCESS ? byte_at(p[i], 0) : 0);
    if (!gmem && i > 0) { // a block inside a segment: the driver alone must refuse it
      CHECK(r != CUDA_SUCCESS, "without gmem, the handle of block %d opened (0x%llx)", i,
            static_cast<unsigned long long>(p[i]));
      continue;
    }
    CHECK(r == CUDA_SUCCESS, "cuIpcOpenMemHandle of block %d: %d", i, r);
    if (r != CUDA_SUCCESS) continue;
    CHECK(byte_at(p[i], 0) == k_fill[i] && byte_at(p[i], k_sizes[i] - 1) == k_fill[i],
          "block %d reads 0x%02x: a wrong address", i, byte_at(p[i], 0));
  }
  if (std::strcmp(mode, "gmem") == 0) { // forged gmem handles: refused, never mapped
    for (int field : {12, 16}) {        // the slot, the nonce (ipc_sharing.cpp)
      CUipcMemHandle forged = h[1];
      forged.reserved[field] = static_cast<char>(forged.reserved[field] ^ 0x5A);
      CUdeviceptr q = 0;
      const CUresult r = cuIpcOpenMemHandle(&q, forged, 0);
      std::printf("ipc import forged=%d rc=%d\n", field, r);
      CHECK(r != CUDA_SUCCESS, "a forged handle (byte %d) opened", field);
    }
  }
  if (gmem) {
    CHECK(cuIpcCloseMemHandle(p[1]) == CUDA_SUCCESS, "close block 1");
    CHECK(byte_at(p[2], 0) == 0x33, "block 2 unreadable after block 1 was closed");
    CUdeviceptr q = 0;
    CHECK(cuIpcOpenMemHandle(&q, h[1], 0) == CUDA_SUCCESS && byte_at(q, 0) == 0x22,
          "reopen block 1");
    p[1] = q;
    CHECK(cuMemsetD8(p[1], 0x44, k_sizes[1]) == CUDA_SUCCESS, "write block 1");
    CHECK(cuMemsetD8(p[2], 0x55, 1) == CUDA_SUCCESS, "write block 2");
    for (int i = 0; i < 3; ++i)
      CHECK(cuIpcCloseMemHandle(p[i]) == CUDA_SUCCESS, "close block %d", i);
    CHECK(cuIpcCloseMemHandle(p[1]) != CUDA_SUCCESS, "a second close of block 1 succeeded");
  } else if (p[0] != 0) {
    CHECK(cuIpcCloseMemHandle(p[0]) == CUDA_SUCCESS, "close block 0");
  }
  std::printf("ipc import done failures=%d\n", g_failures);
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
  std::fprintf(stderr, "usage: ipc_probe export MODE | import FILE MODE (gmem, plain, native)\n");
  return 2;
}
