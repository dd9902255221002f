// The frameworks' own allocator variables, in one table: which ones the trace records (so the
// readers can tell a framework's cache from its per-tensor mode) and what GMEM_FRAMEWORKS=pool
// sets so that each tensor or buffer comes from gmem's pool.
//
// GMEM_FRAMEWORKS (common/options.h) chooses:
//   observe  (the default) PyTorch and CuPy keep their own caching allocators, observed per
//            tensor: gmem's Python bootstrap (python/gmem_bootstrap/, put on PYTHONPATH by the
//            shim in Python processes: interpose/python_bootstrap.h) attaches to PyTorch's
//            trace tracker and CuPy's memory hooks, so every program that runs natively runs,
//            CUDA graphs and torch.compile(mode="reduce-overhead") included, and each tensor is
//            traced with its line; the readers report the caches as reserved memory
//            (tools/frameworks.h). XLA's arena has no per-array hook: when JAX is imported the
//            bootstrap sets the JAX rows below where unset, so gmem's pool serves each array
//            (no program semantics change that we know of). Nothing is set at launch.
//   pool     gmem's pool serves each tensor or buffer: `gmem run` and `pytest --gmem` set the
//            variables below that the user has not set; nothing is observed. PyTorch's per-tensor
//            mode breaks CUDA graphs (torch.cuda.graph, torch.compile(mode="reduce-overhead")),
//            natively too.
//   off      gmem sets nothing, observes nothing and says nothing about frameworks (no
//            bootstrap on PYTHONPATH).
// A variable the user set, to any value, is never changed: an explicit value always wins.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace gmem {

enum class frameworks_mode { observe, pool, off };

// "observe", "pool", "off" -> the mode; anything else -> false (`out` untouched).
bool parse_frameworks_mode(const std::string& text, frameworks_mode& out);
const char* to_string(frameworks_mode mode);

struct framework_setting {
  const char* framework; // "PyTorch"
  const char* variable;  // "PYTORCH_NO_CUDA_MEMORY_CACHING"
  const char* value;     // what GMEM_FRAMEWORKS=pool sets
};

// What pool mode sets, in order. CuPy has no variable for its pool (a program turns it off with
// cupy.cuda.set_allocator(None)): it is observed in every mode.
const framework_setting* framework_pool_settings(std::size_t* count);

// True for a variable the trace records with the GMEM_* ones (NAME=value or NAME).
bool is_recorded_framework_variable(const char* env_entry);

struct framework_env_plan {
  std::vector<std::pair<std::string, std::string>> set;  // variables gmem sets
  std::vector<std::pair<std::string, std::string>> kept; // the user's values, left as they are
  std::string message; // one line (no newline) saying what was done; "" when nothing to say
};

// What `mode` does to an environment in which `lookup(name)` gives the user's value (nullptr:
// unset). Pure: the caller applies `set` and prints `message`.
template <typename Lookup>
framework_env_plan plan_framework_env(frameworks_mode mode, Lookup lookup);

// The message for a plan (exposed for the template above).
std::string describe_framework_plan(const framework_env_plan& plan);

template <typename Lookup>
framework_env_plan plan_framework_env(frameworks_mode mode, Lookup lookup) {
  framework_env_plan plan;
  if (mode != frameworks_mode::pool) return plan;
  std::size_t n = 0;
  const framework_setting* rows = framework_pool_settings(&n);
  for (std::size_t i = 0; i < n; ++i) {
    const char* user = lookup(rows[i].variable);
    if (user != nullptr)
      plan.kept.emplace_back(rows[i].variable, user);
    else
      plan.set.emplace_back(rows[i].variable, rows[i].value);
  }
  plan.message = describe_framework_plan(plan);
  return plan;
}

} // namespace gmem
