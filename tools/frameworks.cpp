#include "tools/frameworks.h"

#include <string_view>

#include "common/units.h"
#include "profiler/format/trace_types.h"
#include "tools/analysis/suppressions.h"

namespace gmem::tools {
namespace {

// One frame pattern: `where` against a native frame's module path or a Python frame's file,
// `function` against its function; each a suppression pattern (suppressions.h), nullptr =
// anything.
struct frame_pattern {
  const char* where;
  const char* function;
};

struct cache_signature {
  framework_cache info;
  // Frames only the cache's own code makes: the cache at work whatever the variables say.
  std::vector<frame_pattern> cache_frames;
  // The framework's allocator module: the cache when cache_on(recorded variables).
  std::vector<const char*> modules;
  bool (*cache_on)(const recorded_env&);
};

const std::string* lookup(const recorded_env& env, const char* name) {
  for (const auto& [n, v] : env)
    if (n == name) return &v;
  return nullptr;
}

// PyTorch's caching allocator is on unless PYTORCH_NO_CUDA_MEMORY_CACHING is exactly 1 or its
// allocator configuration chooses the cudaMallocAsync backend (served per tensor by the driver,
// here by gmem's stream-ordered path).
bool pytorch_cache_on(const recorded_env& env) {
  if (const auto* v = lookup(env, "PYTORCH_NO_CUDA_MEMORY_CACHING"); v && *v == "1") return false;
  for (const char* conf : {"PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"})
    if (const auto* v = lookup(env, conf); v && v->find("cudaMallocAsync") != std::string::npos)
      return false;
  return true;
}

// XLA's BFC allocator is on unless the client allocator is "platform" (a driver allocation
// per buffer) or "cuda_async" (cudaMallocAsync).
bool xla_cache_on(const recorded_env& env) {
  const auto* v = lookup(env, "XLA_PYTHON_CLIENT_ALLOCATOR");
  return !(v && (*v == "platform" || *v == "cuda_async"));
}

const std::vector<cache_signature>& signatures() {
  static const std::vector<cache_signature> k = {
      {{"PyTorch", "PyTorch's caching allocator",
        "its cached segments, not your tensors (the tensors still alive are inside them)",
        "to trace each tensor, start with gmem run --frameworks pool "
        "(PYTORCH_NO_CUDA_MEMORY_CACHING=1; not for CUDA graphs or "
        "torch.compile(mode=\"reduce-overhead\"))",
        static_cast<int>(gmem::trace::observed_framework::pytorch)},
       {{nullptr, "DeviceCachingAllocator::"},
        {nullptr, "cudaMallocMaybeCapturing"},
        {nullptr, "CUDACachingAllocator::*ExpandableSegment"}},
       {"libc10_cuda.so"},
       &pytorch_cache_on},
      {{"CuPy", "CuPy's memory pool", "its pooled chunks, not your arrays",
        "to trace each array, turn the pool off in the program: "
        "cupy.cuda.set_allocator(None)",
        static_cast<int>(gmem::trace::observed_framework::cupy)},
       {{"cupy", "MemoryPool"}, {"cupy/cuda/memory", "MemoryPool"}},
       {},
       nullptr},
      {{"JAX", "XLA's BFC allocator", "its arena, not your arrays",
        "to trace each array, start with gmem run --frameworks pool "
        "(XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false)",
        -1},
       {{nullptr, "BFCAllocator::"}},
       {"xla_extension", "xla_cuda_plugin", "/jaxlib/", "libjax"},
       &xla_cache_on},
  };
  return k;
}

bool frame_matches(const frame_pattern& p, const frame_info& f) {
  const std::string& where = f.python ? f.file : f.module;
  return (p.where == nullptr || pattern_matches(p.where, where)) &&
         (p.function == nullptr || pattern_matches(p.function, f.function));
}

// Framework packages whose Python code is folded from stacks.
constexpr const char* k_python_packages[] = {
    "torch",         "torchvision", "torchaudio",   "functorch",  "triton",
    "jax",           "jaxlib",      "flax",         "optax",      "orbax",
    "chex",          "equinox",     "haiku",        "cupy",       "cupyx",
    "cupy_backends", "numpy",       "transformers", "accelerate", "diffusers",
    "peft",          "safetensors", "deepspeed",    "lightning",  "pytorch_lightning",
};

} // namespace

const framework_cache* framework_cache_of(const std::vector<frame_info>& frames,
                                          const recorded_env& env) {
  for (const auto& sig : signatures())
    for (const auto& f : frames)
      for (const auto& p : sig.cache_frames)
        if (frame_matches(p, f)) return &sig.info;
  for (const auto& sig : signatures()) {
    if (sig.modules.empty() || (sig.cache_on != nullptr && !sig.cache_on(env))) continue;
    for (const auto& f : frames)
      if (!f.python)
        for (const char* m : sig.modules)
          if (pattern_matches(m, f.module)) return &sig.info;
  }
  return nullptr;
}

std::string cache_note(const framework_cache& c, bool observed, std::uint64_t tensor_bytes) {
  if (!observed) return std::string(c.holds) + "; " + c.advice;
  return "memory it keeps for reuse, not leaks; " + format_bytes(tensor_bytes) +
         " of it in live tensors, each traced with its own line";
}

std::vector<const framework_cache*> framework_caches() {
  std::vector<const framework_cache*> out;
  for (const auto& sig : signatures())
    out.push_back(&sig.info);
  return out;
}

bool is_framework_python_frame(const frame_info& f) {
  if (!f.python) return false;
  const std::string_view file = f.file;
  // gmem's own bootstrap (lib/gmem/bootstrap/sitecustomize.py): CuPy's memory hook calls gmem
  // from there.
  if (file.ends_with("/gmem/bootstrap/sitecustomize.py")) return true;
  for (const char* dir : {"/site-packages/", "/dist-packages/"}) {
    for (std::size_t at = file.find(dir); at != std::string_view::npos;
         at = file.find(dir, at + 1)) {
      std::string_view rest = file.substr(at + std::string_view(dir).size());
      const std::string_view top = rest.substr(0, rest.find('/'));
      if (top.size() == rest.size()) continue; // a module file at the top: not a package's
      for (const char* pkg : k_python_packages)
        if (top == pkg) return true;
    }
  }
  return false;
}

} // namespace gmem::tools
