#include "tools/stack_view.h"

#include <string_view>

#include "tools/frameworks.h"

namespace gmem::tools {
namespace {

using gmem::trace::python_note;

std::string_view basename_of(std::string_view path) {
  const auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

frame_info python_frame_info(const gmem::trace::trace& t, const gmem::trace::python_frame& p) {
  const auto& loc = t.location(p);
  frame_info f;
  f.function = loc.function;
  f.file = loc.file;
  f.line = static_cast<int>(p.line);
  f.module = "python";
  f.python = true;
  return f;
}

std::vector<frame_info> native_frames(const gmem::trace::trace& t, std::uint32_t id,
                                      symbolizer& symbols) {
  std::vector<frame_info> frames;
  const auto* ips = t.stack(id);
  if (!ips) return frames;
  frames.reserve(ips->size());
  for (const auto ip : *ips)
    frames.push_back(symbols.resolve(ip));
  std::size_t skip = 0;
  while (skip < frames.size() && is_shim_frame(frames[skip]))
    ++skip;
  if (skip == frames.size()) skip = 0; // nothing else recorded: show what there is
  frames.erase(frames.begin(), frames.begin() + static_cast<std::ptrdiff_t>(skip));
  return frames;
}

} // namespace

std::string lent_mark(const gmem::trace::python_stack& py) {
  if (py.lender != gmem::trace::python_lender::backward) return {};
  if (py.waiting <= 1) return "backward()";
  return "backward(), the latest of " + std::to_string(py.waiting) + " threads waiting";
}

bool is_shim_frame(const frame_info& f) {
  const std::string_view base = basename_of(f.module);
  return !f.python && (starts_with(base, "libgmem") || starts_with(base, "libunwind"));
}

bool is_cuda_api(const frame_info& f) {
  if (f.python) return false;
  const std::string_view fn = f.function;
  return (starts_with(fn, "cuda") || starts_with(fn, "cu")) && fn.find("::") == fn.npos &&
         (starts_with(basename_of(f.module), "libcuda") || starts_with(fn, "cuda") ||
          starts_with(fn, "cuMem"));
}

bool is_runtime_internal(const frame_info& f) {
  if (f.python) return false;
  const std::string_view fn = f.function, base = basename_of(f.module);
  // The static runtime's internals are local symbols of the program: libcudart_static_<hash>.
  return starts_with(fn, "libcudart_static_") || starts_with(base, "libcudart.so") ||
         starts_with(base, "libcuda.so") || is_cuda_api(f);
}

bool is_glue_frame(const frame_info& f) {
  if (f.python) return false;
  const std::string_view fn = f.function, base = basename_of(f.module);
  if (starts_with(base, "libpython") || starts_with(base, "libffi") ||
      starts_with(base, "_ctypes."))
    return true;
  if (starts_with(base, "python3") || starts_with(base, "python")) return true; // static python
  if (starts_with(base, "libc.so")) { // thread and process start
    if (fn.empty()) return true; // a libc without symbols (Ubuntu's): its start code all the same
    for (const char* p : {"__libc_start", "_start", "start_thread", "__clone"})
      if (starts_with(fn, p)) return true;
  }
  if (fn.find("pybind11::cpp_function::") != fn.npos || fn.find("pybind11::detail::") != fn.npos)
    return true;
  for (const char* p : {"_PyEval_", "PyEval_", "_PyObject_", "PyObject_", "_PyFunction_",
                        "_PyVectorcall", "method_vectorcall", "cfunction_", "slot_tp_", "_Py"})
    if (starts_with(fn, p)) return true;
  return false;
}

bool is_allocator_internal(const frame_info& f) {
  if (f.python) return false;
  const std::string_view fn = f.function;
  // PyTorch's caching allocator; CuPy's memory pool (Cython's names for cupy.cuda.memory).
  return fn.find("CUDACachingAllocator::") != fn.npos ||
         starts_with(fn, "cudaMallocMaybeCapturing") ||
         starts_with(fn, "c10::cuda::cudaMallocMaybeCapturing") ||
         (starts_with(fn, "__pyx_") && fn.find("_4cupy_4cuda_6memory_") != fn.npos);
}

std::vector<frame_info> all_frames(const gmem::trace::trace& t, std::uint32_t id,
                                   symbolizer& symbols) {
  std::vector<frame_info> frames;
  if (const auto* py = t.python(id))
    for (const auto& p : py->frames)
      frames.push_back(python_frame_info(t, p));
  for (auto& f : native_frames(t, id, symbols))
    frames.push_back(std::move(f));
  return frames;
}

shown_stack show_stack(const gmem::trace::trace& t, std::uint32_t id, symbolizer& symbols,
                       frame_view view) {
  shown_stack s;
  const auto* py = t.python(id);
  if (py) s.note = py->note;
  if (py && view != frame_view::native) {
    const std::string via = lent_mark(*py);
    for (std::size_t i = 0; i < py->frames.size(); ++i) {
      s.frames.push_back(python_frame_info(t, py->frames[i]));
      if (i >= py->lent_from) s.frames.back().via = via;
    }
  }
  // The frameworks' own Python code folds like the runtime's native frames: the first frame
  // shown is the program's line. A stack with no Python frame of the program keeps them all.
  if (view != frame_view::all) {
    std::vector<frame_info> own;
    for (auto& f : s.frames)
      if (!is_framework_python_frame(f)) own.push_back(f);
    if (!own.empty() && own.size() < s.frames.size()) {
      s.python_folded = s.frames.size() - own.size();
      s.frames = std::move(own);
    }
  }
  // The mark stays on the first lent frame shown: the line whose call the thread worked for.
  bool marked = false;
  for (auto& f : s.frames) {
    if (f.via.empty()) continue;
    if (marked) f.via.clear();
    marked = true;
  }
  s.python_frames = s.frames.size();
  std::vector<frame_info> native = native_frames(t, id, symbols);
  if (view == frame_view::all) {
    for (auto& f : native)
      s.frames.push_back(std::move(f));
    return s;
  }
  // Runtime internals before the API call (libcudart_static_* under cudaMalloc), then the API
  // frames themselves when Python frames already say who called.
  std::size_t first = 0;
  while (first < native.size() && (is_allocator_internal(native[first]) ||
                                   (is_runtime_internal(native[first]) &&
                                    !(is_cuda_api(native[first]) && s.python_frames == 0))))
    ++first;
  if (first == native.size()) first = 0; // all runtime: show it rather than nothing
  s.folded += first;
  const bool one_native = view == frame_view::python_first && s.python_frames > 0;
  for (std::size_t i = first; i < native.size(); ++i) {
    if (is_glue_frame(native[i]) || is_allocator_internal(native[i]) ||
        (one_native && is_runtime_internal(native[i]))) {
      ++s.folded;
      continue;
    }
    if (one_native && s.frames.size() > s.python_frames) {
      ++s.folded;
      continue;
    }
    s.frames.push_back(std::move(native[i]));
  }
  // Every native frame was internals: --native shows them rather than nothing; the default
  // view says so (the printer tells how many were folded and how to see them).
  if (view == frame_view::native && s.frames.empty() && !native.empty()) {
    s.folded = 0;
    for (std::size_t i = first; i < native.size(); ++i)
      s.frames.push_back(std::move(native[i]));
  }
  return s;
}

std::string stack_key(const shown_stack& s) {
  std::string key;
  const std::size_t n = s.python_frames > 0 ? s.python_frames : s.frames.size();
  for (std::size_t i = 0; i < n; ++i) {
    const auto& f = s.frames[i];
    key += f.name() + '\x1f' + f.file + ':' + std::to_string(f.line) + '\x1e';
  }
  if (s.python_frames == 0 && s.note != python_note::none) key += describe(s.note);
  return key;
}

std::string describe(gmem::trace::python_note note) {
  switch (note) {
  case python_note::none:
    return {};
  case python_note::no_gil:
    return "no Python frames: the allocating thread was not running Python code";
  case python_note::finalizing:
    return "no Python frames: the interpreter was shutting down";
  }
  return {};
}

} // namespace gmem::tools
