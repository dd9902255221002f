// A CUDA driver program for the shim's end-to-end tests: `shim_probe ROUTE SCENARIO`. It runs
// under LD_PRELOAD=libgmem.so against the fake libcuda.so.1 (tests/fake_cuda) and prints
// "FAIL: ..." lines for what it can check itself, then the fake's counters
// ("counter NAME=VALUE") for interpose_test.cpp to check against the pool's behaviour.
// Memory scenarios live in probe_memory.cpp; process-level ones (fork, exit, contexts,
// entry points, other interposers) here.
// Exit: 0 ok, 1 failed, 2 usage/setup, 3 the hazard scenario saw corrupted memory.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <random>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "tests/interpose/probe_check.h"

namespace probe {
driver_api g;
int g_failures = 0;
} // namespace probe

namespace {

using namespace probe;

void print_counters() {
  fake_cuda_counters c{};
  g.get_counters(&c);
#define PROBE_PRINT(n) std::printf("counter %s=%llu\n", #n, static_cast<unsigned long long>(c.n));
  FAKE_CUDA_COUNTERS(PROBE_PRINT)
#undef PROBE_PRINT
}

bool setup() {
  CUcontext ctx = nullptr;
  return g.init(0) == CUDA_SUCCESS && g.primary_retain(&ctx, 0) == CUDA_SUCCESS &&
         g.ctx_set_current(ctx) == CUDA_SUCCESS;
}

// The child of a fork stands aside: its calls reach the driver directly.
void scenario_fork() {
  CUdeviceptr p = 0;
  CHECK_CU(g.mem_alloc(&p, 1000));
  const pid_t pid = fork();
  if (pid == 0) {
    fake_cuda_counters before{}, after{};
    g.get_counters(&before);
    CUdeviceptr q = 0;
    const bool ok = g.mem_alloc(&q, 777) == CUDA_SUCCESS && g.mem_free(q) == CUDA_SUCCESS;
    g.get_counters(&after);
    const bool direct = after.mem_alloc_calls == before.mem_alloc_calls + 1;
    std::printf("child ok=%d direct=%d\n", ok ? 1 : 0, direct ? 1 : 0);
    std::fflush(stdout);
    _exit(ok && direct ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  CHECK_CU(g.mem_free(p));
  CUdeviceptr r = 0;
  CHECK_CU(g.mem_alloc(&r, 1000));
  CHECK_CU(g.mem_free(r));
}

// exit() while other threads keep allocating: no crash, no hang, exit status kept.
[[noreturn]] void scenario_exit_threads() {
  CUcontext ctx = nullptr;
  g.primary_retain(&ctx, 0);
  static std::atomic<long> done{0};
  for (int t = 0; t < 4; ++t) {
    std::thread([ctx, t] {
      g.ctx_set_current(ctx);
      std::mt19937 rng(static_cast<unsigned>(t));
      for (;;) {
        CUdeviceptr p = 0;
        if (g.mem_alloc(&p, 1 + rng() % 100000) == CUDA_SUCCESS && g.mem_free(p) != CUDA_SUCCESS) {
          static const char k_msg[] = "late free failed\n"; // a pooled block freed during exit
          (void)!write(1, k_msg, sizeof(k_msg) - 1);
        }
        done.fetch_add(1);
      }
    }).detach();
  }
  for (int i = 0; i < 1000 && done.load() < 2000; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::printf("exiting after %ld allocations\n", done.load());
  std::fflush(stdout);
  std::exit(0);
}

// A destroyed context's pool is dropped; the primary context keeps working; a reset drops it.
void scenario_contexts() {
  CUcontext mine = nullptr, primary = nullptr;
  CHECK_CU(g.primary_retain(&primary, 0));
  CHECK_CU(g.ctx_create(&mine, 0, 0));
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(g.mem_alloc(&a, 5000));
  CHECK_CU(g.ctx_destroy(mine));
  CHECK_CU(g.ctx_set_current(primary));
  CHECK_CU(g.mem_alloc(&b, 5000));
  CHECK_CU(g.memset_d8(b, 1, 5000));
  CHECK_CU(g.mem_free(b));
  CHECK_CU(g.primary_reset(0));
  CHECK_CU(g.primary_retain(&primary, 0));
  CHECK_CU(g.ctx_set_current(primary));
  CHECK_CU(g.mem_alloc(&b, 5000));
  CHECK_CU(g.memset_d8(b, 2, 5000));
  CHECK_CU(g.mem_free(b));
}

// A driver program with its own context, as tests/interpose/contexts_test.sh runs it: six
// device allocations (three freed, three left to the context), one pinned host block, then
// cuCtxDestroy before exit; the primary context is never used.
void scenario_private_context() {
  CUcontext mine = nullptr;
  CHECK_CU(g.ctx_create(&mine, 0, 0));
  CUdeviceptr p[6] = {};
  for (std::size_t i = 0; i < 6; ++i) {
    CHECK_CU(g.mem_alloc(&p[i], (i + 1) * 100000));
    CHECK_CU(g.memset_d8(p[i], static_cast<unsigned char>(i), (i + 1) * 100000));
  }
  void* h = nullptr;
  CHECK_CU(g.mem_alloc_host(&h, 4096));
  CHECK_CU(g.mem_free_host(h));
  for (std::size_t i = 0; i < 3; ++i)
    CHECK_CU(g.mem_free(p[i]));
  CHECK_CU(g.ctx_destroy(mine));
}

// Substitution is by address: the CUDA 2.0 cuMemAlloc (32-bit size) is not ours; the 11.3
// cuGetProcAddress hands out the same hooks as the 12.0 one.
void scenario_old_abi() {
  CHECK(g.get_proc_address != nullptr, "needs the runtime route");
  if (g.get_proc_address == nullptr) return;
  void* v1 = nullptr;
  CUdriverProcAddressQueryResult st{};
  CHECK_CU(g.get_proc_address("cuMemAlloc", &v1, 3000, 0, &st));
  CHECK(v1 != reinterpret_cast<void*>(g.mem_alloc), "v1 cuMemAlloc was substituted");
  unsigned int p32 = 0;
  auto alloc_v1 = reinterpret_cast<CUresult (*)(unsigned int*, unsigned int)>(v1);
  CHECK_CU(alloc_v1(&p32, 1000));
  void* gpa11 = nullptr;
  CHECK_CU(g.get_proc_address("cuGetProcAddress", &gpa11, 11030, 0, &st));
  auto old_gpa = reinterpret_cast<CUresult (*)(const char*, void**, int, cuuint64_t)>(gpa11);
  void* alloc = nullptr;
  CHECK_CU(old_gpa("cuMemAlloc", &alloc, 12000, 0));
  CHECK(alloc == reinterpret_cast<void*>(g.mem_alloc),
        "11.3 cuGetProcAddress gave another cuMemAlloc");
}

// Another preloaded library that wraps getpid() with dlsym(RTLD_NEXT) must still work.
void scenario_other_interposer() {
  auto calls = reinterpret_cast<long (*)()>(dlsym(RTLD_DEFAULT, "other_interposer_calls"));
  CHECK(calls != nullptr, "libother_interposer.so is not preloaded");
  if (calls == nullptr) return;
  const long before = calls();
  const pid_t pid = getpid();
  CHECK(pid == static_cast<pid_t>(syscall(SYS_getpid)), "getpid through the interposer is wrong");
  CHECK(calls() == before + 1, "the interposer's getpid was not called");
  CUdeviceptr p = 0;
  CHECK_CU(g.mem_alloc(&p, 1000));
  CHECK_CU(g.mem_free(p));
}

// Two devices: a pool each; a pointer freed while the other device's context is current.
void scenario_two_devices() {
  CUcontext c0 = nullptr, c1 = nullptr;
  CHECK_CU(g.primary_retain(&c0, 0));
  CHECK_CU(g.primary_retain(&c1, 1));
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(g.ctx_set_current(c0));
  CHECK_CU(g.mem_alloc(&a, 3000));
  CHECK_CU(g.ctx_set_current(c1));
  CHECK_CU(g.mem_alloc(&b, 3000));
  CHECK_CU(g.mem_free(a));
  CHECK_CU(g.ctx_set_current(c0));
  CHECK_CU(g.mem_free(b));
}

// Not a test: ns per cuMemAlloc_v2 + cuMemFree_v2 pair of 512 bytes (the shim's own cost, as
// the fake driver's calls cost next to nothing).
void scenario_pair_cost() {
  for (int round = 0; round < 3; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    constexpr int n = 1000000;
    for (int i = 0; i < n; ++i) {
      CUdeviceptr p = 0;
      g.mem_alloc(&p, 512);
      g.mem_free(p);
    }
    const auto t1 = std::chrono::steady_clock::now();
    std::printf("pair_cost %.1f ns\n",
                std::chrono::duration<double, std::nano>(t1 - t0).count() / n);
  }
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: shim_probe ROUTE SCENARIO\n");
    return 2;
  }
  const std::string error = probe::load(argv[1], g);
  if (!error.empty()) {
    std::printf("FAIL: %s\n", error.c_str());
    return 2;
  }
  if (!setup()) {
    std::printf("FAIL: driver setup\n");
    return 2;
  }
  const std::string s = argv[2];
  int rc = 0;
  if (s == "basic")
    scenario_basic();
  else if (s == "errors")
    scenario_errors();
  else if (s == "meminfo")
    scenario_meminfo();
  else if (s == "limit")
    scenario_limit();
  else if (s == "range")
    scenario_range();
  else if (s == "async")
    scenario_async();
  else if (s == "async_no_context")
    scenario_async_no_context();
  else if (s == "host")
    scenario_host();
  else if (s == "hazard")
    rc = scenario_hazard(false);
  else if (s == "hazard_async")
    rc = scenario_hazard(true);
  else if (s == "stress")
    scenario_stress();
  else if (s == "hazard_threads")
    rc = scenario_hazard_threads(false);
  else if (s == "hazard_threads_capture")
    rc = scenario_hazard_threads(true);
  else if (s == "fork")
    scenario_fork();
  else if (s == "exit_threads")
    scenario_exit_threads();
  else if (s == "capture")
    scenario_capture(false);
  else if (s == "capture_10000")
    scenario_capture(true);
  else if (s == "contexts")
    scenario_contexts();
  else if (s == "strict_free")
    scenario_strict_free();
  else if (s == "strict_alloc")
    scenario_strict_alloc();
  else if (s == "private_context")
    scenario_private_context();
  else if (s == "old_abi")
    scenario_old_abi();
  else if (s == "other_interposer")
    scenario_other_interposer();
  else if (s == "two_devices")
    scenario_two_devices();
  else if (s == "stream_destroy")
    scenario_stream_destroy();
  else if (s == "ipc")
    scenario_ipc();
  else if (s.rfind("barrier:", 0) == 0 && s.find(':', 8) != std::string::npos)
    rc = scenario_barrier(s.substr(8, s.find(':', 8) - 8), s.substr(s.find(':', 8) + 1));
  else if (s.rfind("barrier_capture_thread:", 0) == 0)
    rc = scenario_barrier_capture_thread(s.substr(23));
  else if (s == "barrier_capture_unseen")
    rc = scenario_barrier_capture_unseen();
  else if (s.rfind("barrier_capture:", 0) == 0)
    rc = scenario_barrier_capture(s.substr(16));
  else if (s == "barrier_destroyed")
    rc = scenario_barrier_destroyed();
  else if (s == "barrier_chain")
    rc = scenario_barrier_chain();
  else if (s == "barrier_host")
    scenario_barrier_host();
  else if (s == "vmm_retire")
    scenario_vmm_retire();
  else if (s == "vmm_budget")
    scenario_vmm_budget();
  else if (s == "arena_growth")
    scenario_arena_growth();
  else if (s == "arena_trim")
    scenario_arena_trim();
  else if (s == "arena_ipc")
    scenario_arena_ipc();
  else if (s == "arena_stitch")
    scenario_arena_stitch();
  else if (s == "pair_cost")
    scenario_pair_cost();
  else {
    std::printf("FAIL: unknown scenario %s\n", s.c_str());
    return 2;
  }
  print_counters();
  std::fflush(stdout);
  if (g_failures != 0) return 1;
  return rc;
}
