// Shared by the shim probe's files (tests/interpose/shim_probe.cpp): the driver table, the
// CHECK macros that print "FAIL: ..." and count, and the scenario entry points.
#pragma once

#include <cstdio>
#include <string>

#include "tests/interpose/probe_driver.h"

namespace probe {

extern driver_api g;
extern int g_failures;

#define CHECK(cond, ...)                                                                           \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      std::printf("FAIL: %s:%d: %s: ", __FILE__, __LINE__, #cond);                                 \
      std::printf(__VA_ARGS__);                                                                    \
      std::printf("\n");                                                                           \
      ++::probe::g_failures;                                                                       \
    }                                                                                              \
  } while (0)
#define CHECK_CU(call) CHECK((call) == CUDA_SUCCESS, "%s", #call)

struct block {
  CUdeviceptr p;
  std::size_t n;
};

// Memory scenarios (probe_memory.cpp).
void scenario_basic();
void scenario_errors();
void scenario_meminfo();
void scenario_limit();
void scenario_range();
void scenario_async();
void scenario_async_no_context();
void scenario_host();
int scenario_hazard(bool async); // 3 = corrupted
void scenario_stress();
int scenario_hazard_threads(bool capture); // probe_threads.cpp; 3 = corrupted
void scenario_capture(bool form_10000);
void scenario_ipc();
void scenario_stream_destroy();

// Device-side barrier scenarios (probe_barrier.cpp); 3 = corrupted.
int scenario_barrier(const std::string& old_stream, const std::string& new_stream);
int scenario_barrier_capture(const std::string& capturing);
int scenario_barrier_destroyed();
int scenario_barrier_chain();
int scenario_barrier_capture_thread(const std::string& form);
int scenario_barrier_capture_unseen();
void scenario_barrier_host();
void scenario_strict_free();
void scenario_strict_alloc();

// Virtual-memory segments (probe_vmm.cpp).
void scenario_vmm_retire();
void scenario_vmm_budget();

// The arena, GMEM_ARENA=1 (probe_arena.cpp).
void scenario_arena_growth();
void scenario_arena_trim();
void scenario_arena_ipc();
void scenario_arena_stitch();

} // namespace probe
