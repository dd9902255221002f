// A CUDA driver program for the trace end-to-end test (shm_e2e_test.cpp). Run under
// LD_PRELOAD=libgmem.so against the fake libcuda.so.1: `trace_e2e_program exit|spin COUNT`.
// Allocates COUNT blocks from two call sites, frees every third, prints what stays live
//   site a|b FUNCTION_ADDRESS
//   live ADDRESS REQUESTED SITE
//   ready
// then returns from main (exit) or sleeps until killed (spin).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

#include "tests/interpose/probe_driver.h"

namespace {

probe::driver_api g;

struct block {
  CUdeviceptr p;
  std::size_t n;
  char site;
};

__attribute__((noinline)) CUdeviceptr allocate_at_site_a(std::size_t n) {
  CUdeviceptr p = 0;
  if (g.mem_alloc(&p, n) != CUDA_SUCCESS) return 0;
  asm volatile("" ::: "memory"); // keep this frame
  return p;
}

__attribute__((noinline)) CUdeviceptr allocate_at_site_b(std::size_t n) {
  CUdeviceptr p = 0;
  if (g.mem_alloc(&p, n) != CUDA_SUCCESS) return 0;
  asm volatile("" ::: "memory");
  return p;
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: trace_e2e_program exit|spin COUNT\n");
    return 2;
  }
  const bool spin = std::strcmp(argv[1], "spin") == 0;
  const int count = std::atoi(argv[2]);
  const std::string error = probe::load("dlsym", g);
  CUcontext ctx = nullptr;
  if (!error.empty() || g.init(0) != CUDA_SUCCESS || g.primary_retain(&ctx, 0) != CUDA_SUCCESS ||
      g.ctx_set_current(ctx) != CUDA_SUCCESS) {
    std::fprintf(stderr, "trace_e2e_program: driver setup failed: %s\n", error.c_str());
    return 2;
  }
  std::printf("site a %p\nsite b %p\n", reinterpret_cast<void*>(&allocate_at_site_a),
              reinterpret_cast<void*>(&allocate_at_site_b));
  std::vector<block> blocks;
  for (int i = 0; i < count; ++i) {
    const std::size_t n = (i % 2 == 0 ? 1000 : 300000) + static_cast<std::size_t>(i);
    const char site = i % 2 == 0 ? 'a' : 'b';
    const CUdeviceptr p = site == 'a' ? allocate_at_site_a(n) : allocate_at_site_b(n);
    if (p == 0) {
      std::fprintf(stderr, "trace_e2e_program: allocation %d failed\n", i);
      return 1;
    }
    blocks.push_back({p, n, site});
  }
  for (std::size_t i = 0; i < blocks.size(); i += 3)
    g.mem_free(blocks[i].p);
  for (std::size_t i = 0; i < blocks.size(); ++i)
    if (i % 3 != 0)
      std::printf("live %llu %zu %c\n", static_cast<unsigned long long>(blocks[i].p), blocks[i].n,
                  blocks[i].site);
  std::printf("ready\n");
  std::fflush(stdout);
  if (spin)
    for (;;)
      pause();
  return 0;
}
