#include "common/framework_env.h"

#include <cstring>

namespace gmem {
namespace {

// PyTorch reads PYTORCH_NO_CUDA_MEMORY_CACHING as exactly "1". Its cudaMallocAsync backend
// would serve each tensor through gmem's stream-ordered path too, but needs
// PYTORCH_CUDA_ALLOC_CONF, which users set for other reasons: the variable that stands alone is
// the one set. XLA's platform allocator asks the driver for each buffer; without preallocation
// nothing else reserves the device.
constexpr framework_setting k_pool_settings[] = {
    {"PyTorch", "PYTORCH_NO_CUDA_MEMORY_CACHING", "1"},
    {"JAX", "XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
    {"JAX", "XLA_PYTHON_CLIENT_PREALLOCATE", "false"},
};

// What the readers interpret (tools/frameworks.cpp): the pool settings and the variables that
// choose another allocator or backend.
constexpr const char* k_recorded[] = {
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
};

std::string join(const std::vector<std::pair<std::string, std::string>>& vars) {
  std::string s;
  for (const auto& [name, value] : vars)
    s += (s.empty() ? "" : " ") + name + "=" + value;
  return s;
}

} // namespace

bool parse_frameworks_mode(const std::string& text, frameworks_mode& out) {
  if (text == "observe")
    out = frameworks_mode::observe;
  else if (text == "pool")
    out = frameworks_mode::pool;
  else if (text == "off")
    out = frameworks_mode::off;
  else
    return false;
  return true;
}

const char* to_string(frameworks_mode mode) {
  switch (mode) {
  case frameworks_mode::observe:
    return "observe";
  case frameworks_mode::pool:
    return "pool";
  case frameworks_mode::off:
    return "off";
  }
  return "observe";
}

const framework_setting* framework_pool_settings(std::size_t* count) {
  *count = sizeof k_pool_settings / sizeof k_pool_settings[0];
  return k_pool_settings;
}

bool is_recorded_framework_variable(const char* env_entry) {
  for (const char* name : k_recorded) {
    const std::size_t n = std::strlen(name);
    if (std::strncmp(env_entry, name, n) == 0 && (env_entry[n] == '=' || env_entry[n] == '\0'))
      return true;
  }
  return false;
}

std::string describe_framework_plan(const framework_env_plan& plan) {
  std::string m = "gmem: GMEM_FRAMEWORKS=pool: ";
  m += plan.set.empty() ? std::string("set nothing") : "set " + join(plan.set);
  if (!plan.kept.empty()) m += "; kept as you set them: " + join(plan.kept);
  m += " (CUDA graphs and torch.compile(mode=\"reduce-overhead\") need PyTorch's cache: "
       "--frameworks observe)";
  return m;
}

} // namespace gmem
