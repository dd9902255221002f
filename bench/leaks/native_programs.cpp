// Native programs of the leak benchmark (bench/leaks/run_leaks.py): each runs a "service" loop
// of steps through the CUDA driver API (examples/cuda_driver.h: a GPU or the fake driver), then
// prints "ready" and waits for stdin to close, so the runner judges it while it runs (a native
// program that exits leaks, by compute-sanitizer's rule, whatever it never freed). Every line
// that allocates memory which grows as the program repeats carries a LEAK(PROGRAM) marker; the
// runner expects exactly those lines of PROGRAM as leaks.
//   native_programs PROGRAM [STEPS]
// Leaks: step_outputs, growing_cache, early_return. Clean: weights_and_steps, bounded_cache,
// per_step_buffers.
#include "examples/cuda_driver.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <unistd.h>
#include <vector>

namespace {

examples::cuda_driver g_cu;

CUdeviceptr alloc(std::size_t bytes) {
  CUdeviceptr p = 0;
  examples::cuda_driver::check(g_cu.mem_alloc(&p, bytes), "cuMemAlloc");
  return p;
}

// A step's temporaries: allocated and freed.
__attribute__((noinline)) void temporaries() {
  CUdeviceptr a = alloc(64 << 10), b = alloc(256 << 10);
  g_cu.mem_free(b);
  g_cu.mem_free(a);
}

std::vector<CUdeviceptr> g_kept;

__attribute__((noinline)) void step_outputs(int steps) {
  for (int s = 0; s < steps; ++s) {
    temporaries();
    g_kept.push_back(alloc(1 << 20)); // LEAK(step_outputs): every step's output kept
  }
}

__attribute__((noinline)) void growing_cache(int steps) {
  std::map<int, CUdeviceptr> cache;
  for (int s = 0; s < steps; ++s) {
    temporaries();
    cache[s] = alloc(128 << 10); // LEAK(growing_cache): a new key each step, never evicted
  }
  for (auto& [k, p] : cache)
    g_kept.push_back(p);
}

__attribute__((noinline)) bool run_batch(int s) {
  CUdeviceptr scratch = alloc(512 << 10); // LEAK(early_return): the early return skips the free
  if (s % 5 == 2) return false;
  g_cu.mem_free(scratch);
  return true;
}

__attribute__((noinline)) void early_return(int steps) {
  for (int s = 0; s < steps; ++s) {
    temporaries();
    run_batch(s);
  }
}

__attribute__((noinline)) void weights_and_steps(int steps) {
  for (int w = 0; w < 24; ++w)
    g_kept.push_back(alloc(2 << 20)); // held: the model's weights, loaded once
  for (int s = 0; s < steps; ++s)
    temporaries();
}

__attribute__((noinline)) void bounded_cache(int steps) {
  std::deque<CUdeviceptr> lru; // at most 4 entries, the oldest evicted
  for (int s = 0; s < steps; ++s) {
    temporaries();
    lru.push_back(alloc(256 << 10)); // held: a bounded cache
    if (lru.size() > 4) {
      g_cu.mem_free(lru.front());
      lru.pop_front();
    }
  }
  for (CUdeviceptr p : lru)
    g_kept.push_back(p);
}

__attribute__((noinline)) void per_step_buffers(int steps) {
  std::vector<CUdeviceptr> buffers;
  for (int s = 0; s < steps; ++s) {
    for (CUdeviceptr p : buffers)
      g_cu.mem_free(p);
    buffers.clear();
    temporaries();
    for (int i = 0; i < 8; ++i)
      buffers.push_back(alloc(96 << 10)); // held: the last step's buffers, replaced each step
  }
  g_kept.insert(g_kept.end(), buffers.begin(), buffers.end());
}

} // namespace

int main(int argc, char** argv) {
  struct program {
    const char* name;
    void (*run)(int);
  };
  const program programs[] = {
      {"step_outputs", step_outputs},   {"growing_cache", growing_cache},
      {"early_return", early_return},   {"weights_and_steps", weights_and_steps},
      {"bounded_cache", bounded_cache}, {"per_step_buffers", per_step_buffers}};
  const program* chosen = nullptr;
  for (const auto& p : programs)
    if (argc > 1 && std::strcmp(argv[1], p.name) == 0) chosen = &p;
  const int steps = argc > 2 ? std::atoi(argv[2]) : 40;
  if (chosen == nullptr || steps <= 0) {
    std::fprintf(stderr, "usage: native_programs PROGRAM [STEPS]; programs:");
    for (const auto& p : programs)
      std::fprintf(stderr, " %s", p.name);
    std::fprintf(stderr, "\n");
    return 2;
  }
  g_cu = examples::cuda_driver::open();
  chosen->run(steps);
  std::printf("ready %d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  char buf[64];
  while (read(STDIN_FILENO, buf, sizeof buf) > 0) {
  }
  return 0;
}
