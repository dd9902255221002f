// What gmem's readers know about PyTorch, CuPy and JAX/XLA, in one table (frameworks.cpp):
//
// - Their caching allocators. A framework that keeps its own cache asks the driver for large
//   segments and keeps them when its tensors are freed; what is outstanding at exit is then the
//   cache, not the program's tensors (those still alive are inside it, unseen). A call site
//   whose frames show a cache at work is listed apart by `gmem leaks`, the exit summary of
//   `gmem run`, `gmem report` and the exporter, with the way to trace each tensor, and is not
//   counted as a leak.
// - Their own Python code, folded from stacks (stack_view.h) so the first frame shown is the
//   program's line.
//
// A cache is recognised in two ways. Its functions (DeviceCachingAllocator::malloc,
// tsl::BFCAllocator, CuPy's MemoryPool) appear only while the cache is at work. Its module
// (libc10_cuda.so, XLA's) also serves the per-tensor modes (PYTORCH_NO_CUDA_MEMORY_CACHING=1,
// XLA_PYTHON_CLIENT_ALLOCATOR=platform), so a module alone counts only when the variables the
// trace recorded at start (common/framework_env.h) leave the cache on: unset, as every user
// has them, means on.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tools/symbolizer.h"

namespace gmem::tools {

struct framework_cache {
  const char* framework; // "PyTorch"
  const char* cache;     // "PyTorch's caching allocator"
  const char* holds;     // "cached segments, not your tensors"
  const char* advice;    // how to trace each tensor instead
  // The framework's bit in trace_info::observed_frameworks when gmem can observe its allocator
  // per allocation (trace::observed_framework), else -1. When set in a trace, its tensors are
  // in it one by one (alloc_kind::tensor) and the cache is reported as reserved memory.
  int observed_as;
};

// What the cache's sites hold, after "<cache> holds X in N allocations": `observed` = its
// tensors were traced one by one (`tensor_bytes` of them live), else the cache's `holds` and
// `advice`.
std::string cache_note(const framework_cache& c, bool observed, std::uint64_t tensor_bytes);

using recorded_env = std::vector<std::pair<std::string, std::string>>; // trace_info::options

// The framework cache that made the allocation of `frames` (every frame, Python and native,
// nothing folded: stack_view.h's all_frames()), or nullptr.
const framework_cache* framework_cache_of(const std::vector<frame_info>& frames,
                                          const recorded_env& env);

// Every cache the table knows, in table order (tests, docs).
std::vector<const framework_cache*> framework_caches();

// A Python frame of a framework's own code: a file under site-packages/ or dist-packages/ of
// torch, jax, jaxlib, cupy, transformers, accelerate, flax, optax, numpy and their kin, or of
// gmem's Python bootstrap (its CuPy memory hook).
bool is_framework_python_frame(const frame_info& f);

} // namespace gmem::tools
