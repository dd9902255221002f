// Cost of trace recording (Google Benchmark; no GPU). Targets (issue 4): <= 40 ns added per
// alloc+free pair with stacks off; <= 1.5 us per allocation with stacks of depth 16.
//   make build/bench/trace_bench && build/bench/trace_bench
// BM_pair_*: one alloc + one free record into a trace with the default capacities (1M live
// allocations), over a working set of 4096 addresses. BM_stack_*: capture + dedup of a stack
// from 24 frames deep, then the pair. BM_hooks_*: the same through interpose/trace_hooks.h's
// entry points (recorder, /dev/shm object), as libgmem.so calls them.
#include <benchmark/benchmark.h>
#include <cstdlib>
#include <memory>
#include <vector>

#include "interpose/trace_hooks.h"
#include "profiler/recorder.h"
#include "profiler/stack_capture.h"
#include "profiler/trace_reader.h"
#include "profiler/trace_writer.h"

using namespace gmem::trace;

namespace {

constexpr std::size_t k_working_set = 4096;

struct buffer_trace {
  std::vector<std::uint64_t> words;
  std::unique_ptr<trace_writer> writer;
  explicit buffer_trace(std::uint32_t depth) {
    writer_config c;
    c.stack_depth = depth;
    words.assign(c.total_bytes() / 8, 0);
    writer = std::make_unique<trace_writer>(words.data(), c, process_identity::current());
  }
};

std::uintptr_t address_of(std::size_t i) {
  return 0x7f0000000000 + (i % k_working_set) * 4096;
}

void BM_pair_baseline(benchmark::State& state) { // the loop without recording
  std::size_t i = 0;
  for (auto _ : state)
    benchmark::DoNotOptimize(address_of(i++));
}
BENCHMARK(BM_pair_baseline);

void BM_pair_stacks_off(benchmark::State& state) {
  static buffer_trace* const t = new buffer_trace(0); // shared by the threads, kept
  std::size_t i = static_cast<std::size_t>(state.thread_index()) * 100000;
  for (auto _ : state) {
    const std::uintptr_t a = address_of(i++) + static_cast<std::uintptr_t>(state.thread_index());
    t->writer->alloc(a, 1000, 1024, 0, 0, alloc_kind::device, 0);
    t->writer->free(a, 0, 0, alloc_kind::device);
  }
}
BENCHMARK(BM_pair_stacks_off)->Threads(1)->Threads(2);

template <int N> __attribute__((noinline)) std::uint32_t deep(trace_writer& w) {
  if constexpr (N == 0) {
    return w.capture_stack(0);
  } else {
    const std::uint32_t id = deep<N - 1>(w);
    benchmark::ClobberMemory(); // a real frame at every level
    return id;
  }
}

void stack_bench(benchmark::State& state, bool libgcc) {
  init_unwinder(libgcc);
  buffer_trace t(static_cast<std::uint32_t>(state.range(0)));
  std::size_t i = 0;
  for (auto _ : state) {
    const std::uint32_t stack = deep<24>(*t.writer);
    const std::uintptr_t a = address_of(i++);
    t.writer->alloc(a, 1000, 1024, 0, 0, alloc_kind::device, stack);
    t.writer->free(a, 0, 0, alloc_kind::device);
  }
  state.SetLabel(to_string(init_unwinder()));
}
void BM_stack(benchmark::State& state) {
  stack_bench(state, false);
}
BENCHMARK(BM_stack)->Arg(4)->Arg(8)->Arg(16)->Arg(32);

void BM_hooks_pair_stacks_off(benchmark::State& state) {
  std::size_t i = 0;
  for (auto _ : state) {
    const std::uintptr_t a = address_of(i++);
    alloc(a, 1000, 1024, 0, 0, alloc_kind::device, 0);
    free(a, 0, 0, alloc_kind::device);
  }
}
BENCHMARK(BM_hooks_pair_stacks_off);

void BM_hooks_alloc_with_stack(benchmark::State& state) {
  std::size_t i = 0;
  for (auto _ : state) {
    const std::uint32_t stack = capture_stack(); // the hook's depth: GMEM_STACK_DEPTH (16)
    const std::uintptr_t a = address_of(i++);
    alloc(a, 1000, 1024, 0, 0, alloc_kind::device, stack);
    free(a, 0, 0, alloc_kind::device);
  }
}
BENCHMARK(BM_hooks_alloc_with_stack);

} // namespace

int main(int argc, char** argv) {
  setenv("GMEM_STACK_DEPTH", "16", 0);
  init(); // the recorder, as libgmem.so starts it
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const std::string name = recorder_object_name();
  if (!name.empty()) remove_shm(name, nullptr); // don't leave the benchmark's trace behind
  return 0;
}
