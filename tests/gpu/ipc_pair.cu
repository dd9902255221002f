// CUDA IPC between two processes on the real driver (the classic cudaIpcGetMemHandle pattern).
//   ipc_pair export MODE: cudaMallocs three blocks of 256 KiB (one pooled segment under gmem:
//     the first at its start, the others inside), a 64 MiB buffer (the arena by default) and
//     two 3 MiB blocks (one arena page, the second inside it), fills each with its own byte,
//     exports all six, and runs `ipc_pair import FILE MODE` (MODE plain: the child without
//     LD_PRELOAD). The importer checks every byte through the mapping, adds 1 to each block
//     with a kernel, closes and reopens blocks 1 and 3; the exporter checks the increments
//     (a wrong offset would add twice to one of two neighbours and never to the other).
//     Under gmem (and natively) every block must export and open. plain: a gmem handle
//     ('gmemIPC' bytes) must fail to open, never map the wrong memory; the driver's own
//     handles (a block at the start of its segment) must open. Exit 0 ok, 1 a check failed.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {
int g_fail = 0;
#define CHECK(c, ...)                                                                              \
  do {                                                                                             \
    if (!(c)) {                                                                                    \
      std::printf("FAIL: " __VA_ARGS__);                                                           \
      std::printf("\n");                                                                           \
      ++g_fail;                                                                                    \
    }                                                                                              \
  } while (0)

constexpr int k_blocks = 6;
const std::size_t k_size[k_blocks] = {256 << 10, 256 << 10, 256 << 10, std::size_t{64} << 20,
                                      3 << 20,   3 << 20};

// A handle gmem made (only an importer under gmem opens it), not the driver's.
bool gmem_handle(const cudaIpcMemHandle_t& h) {
  return std::memcmp(h.reserved, "gmemIPC", 7) == 0;
}

__global__ void add_one(unsigned char* p, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    p[i] = static_cast<unsigned char>(p[i] + 1);
}

bool all_equal(const void* dev, std::size_t n, unsigned char v) {
  unsigned char* h = static_cast<unsigned char*>(std::malloc(n));
  bool ok = cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost) == cudaSuccess;
  for (std::size_t i = 0; ok && i < n; ++i)
    ok = h[i] == v;
  std::free(h);
  return ok;
}

int run_export(const char* self, const char* mode) {
  void* p[k_blocks] = {};
  cudaIpcMemHandle_t h[k_blocks] = {};
  bool exported[k_blocks] = {};
  for (int i = 0; i < k_blocks; ++i) {
    CHECK(cudaMalloc(&p[i], k_size[i]) == cudaSuccess, "cudaMalloc %d", i);
    CHECK(cudaMemset(p[i], 0x10 * (i + 1), k_size[i]) == cudaSuccess, "cudaMemset %d", i);
    const cudaError_t r = cudaIpcGetMemHandle(&h[i], p[i]);
    exported[i] = r == cudaSuccess;
    std::printf("ipc_pair export block=%d rc=%d (%s) gmem_handle=%d\n", i, r, cudaGetErrorString(r),
                exported[i] && gmem_handle(h[i]) ? 1 : 0);
    if (std::strcmp(mode, "native") == 0 || std::strcmp(mode, "gmem") == 0)
      CHECK(exported[i], "block %d did not export", i);
  }
  CHECK(cudaDeviceSynchronize() == cudaSuccess, "sync");
  char path[] = "/tmp/gmem-ipc-pair.XXXXXX";
  const int fd = mkstemp(path);
  CHECK(fd >= 0 && write(fd, h, sizeof h) == static_cast<ssize_t>(sizeof h), "handle file");
  close(fd);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    if (std::strcmp(mode, "plain") == 0) unsetenv("LD_PRELOAD");
    execl(self, self, "import", path, mode, static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  unlink(path);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "importer status %d", status);
  for (int i = 0; i < k_blocks; ++i) {
    const bool opened = exported[i] && (std::strcmp(mode, "plain") != 0 || !gmem_handle(h[i]));
    const unsigned char want = static_cast<unsigned char>(0x10 * (i + 1) + (opened ? 1 : 0));
    CHECK(all_equal(p[i], k_size[i], want), "block %d does not hold 0x%02x", i, want);
    CHECK(cudaFree(p[i]) == cudaSuccess, "cudaFree %d", i);
  }
  std::printf("ipc_pair export failures=%d\n", g_fail);
  return g_fail == 0 ? 0 : 1;
}

int run_import(const char* path, const char* mode) {
  cudaIpcMemHandle_t h[k_blocks] = {};
  FILE* f = std::fopen(path, "rb");
  if (f == nullptr || std::fread(h, sizeof h, 1, f) != 1) return 2;
  std::fclose(f);
  const bool plain = std::strcmp(mode, "plain") == 0;
  for (int i = 0; i < k_blocks; ++i) {
    void* q = nullptr;
    const cudaError_t r = cudaIpcOpenMemHandle(&q, h[i], cudaIpcMemLazyEnablePeerAccess);
    std::printf("ipc_pair import block=%d rc=%d (%s)\n", i, r, cudaGetErrorString(r));
    if (r != cudaSuccess) {
      (void)cudaGetLastError();
      if (!plain || !gmem_handle(h[i])) CHECK(false, "block %d did not open", i);
      continue;
    }
    if (plain && gmem_handle(h[i])) CHECK(false, "without gmem, gmem handle %d opened", i);
    CHECK(all_equal(q, k_size[i], static_cast<unsigned char>(0x10 * (i + 1))),
          "block %d: wrong bytes through the mapping (wrong address?)", i);
    if (i == 1 || i == 3) { // close and reopen
      CHECK(cudaIpcCloseMemHandle(q) == cudaSuccess, "close block %d", i);
      CHECK(cudaIpcOpenMemHandle(&q, h[i], cudaIpcMemLazyEnablePeerAccess) == cudaSuccess,
            "reopen block %d", i);
    }
    add_one<<<64, 256>>>(static_cast<unsigned char*>(q), k_size[i]);
    CHECK(cudaDeviceSynchronize() == cudaSuccess, "kernel on block %d", i);
    CHECK(cudaIpcCloseMemHandle(q) == cudaSuccess, "close block %d", i);
  }
  std::printf("ipc_pair import failures=%d\n", g_fail);
  return g_fail == 0 ? 0 : 1;
}
} // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "export") == 0) return run_export(argv[0], argv[2]);
  if (argc == 4 && std::strcmp(argv[1], "import") == 0) return run_import(argv[2], argv[3]);
  std::fprintf(stderr, "usage: ipc_pair export gmem|plain|native\n");
  return 2;
}
