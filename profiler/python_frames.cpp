#include "profiler/python_frames.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <pthread.h>
#include <string>
#include <sys/types.h>

#include "pool/spin_mutex.h"
#include "profiler/trace_layout.h"

namespace gmem::trace {

namespace {

namespace pw = layout::python_word;

// The CPython functions used, all in the stable or long-public API of 3.10..3.13. Objects are
// opaque pointers: no struct layout of any version is read.
struct cpython_api {
  int (*is_initialized)();
  int (*is_finalizing)(); // _Py_IsFinalizing (3.10-3.12) or Py_IsFinalizing (3.13)
  int (*gil_check)();
  void* (*tstate_unchecked)(); // _PyThreadState_UncheckedGet / PyThreadState_GetUnchecked
  void* (*tstate_frame)(void*);
  void* (*frame_back)(void*);
  void* (*frame_code)(void*);
  int (*frame_line)(void*);
  int (*frame_lasti)(void*); // 3.11+; nullptr before
  int (*gc_disable)();       // PyGC_Disable / PyGC_Enable (3.10+): previous state
  int (*gc_enable)();
  void (*incref)(void*);
  void (*decref)(void*);
  void* (*get_attr)(void*, const char*);
  const char* (*as_utf8)(void*, ssize_t*);
  void* (*err_occurred)();
  void (*err_fetch)(void**, void**, void**);
  void (*err_restore)(void*, void*, void*);
  void (*err_clear)();
  int minor = 0;
};

std::atomic<const cpython_api*> g_api{nullptr};
std::atomic<bool> g_forked{false};

void on_fork_child() {
  g_forked.store(true, std::memory_order_relaxed);
}

template <typename F> bool resolve(F& fn, const char* name, const char* alt = nullptr) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (!p && alt) p = dlsym(RTLD_DEFAULT, alt);
  fn = reinterpret_cast<F>(p);
  return p != nullptr;
}

// "3.12.3 (main, ...) [GCC ...]" -> 12 for 3.10..3.13 with a GIL; 0 otherwise.
int supported_minor(const char* version) {
  if (!version) return 0;
  int major = 0, minor = 0;
  if (std::sscanf(version, "%d.%d", &major, &minor) != 2) return 0;
  if (major != 3 || minor < 10 || minor > 13) return 0;
  if (std::strstr(version, "free-threading")) return 0; // no GIL to rely on
  return minor;
}

const cpython_api* load_api() {
  const char* (*get_version)() = nullptr;
  if (!resolve(get_version, "Py_GetVersion")) return nullptr;
  const int minor = supported_minor(get_version());
  if (minor == 0) return nullptr;
  auto* a = new cpython_api(); // leaked: hooks may run during and after exit
  a->minor = minor;
  const bool ok =
      resolve(a->is_initialized, "Py_IsInitialized") &&
      resolve(a->is_finalizing, minor >= 13 ? "Py_IsFinalizing" : "_Py_IsFinalizing",
              "_Py_IsFinalizing") &&
      resolve(a->gil_check, "PyGILState_Check") &&
      resolve(a->tstate_unchecked,
              minor >= 13 ? "PyThreadState_GetUnchecked" : "_PyThreadState_UncheckedGet",
              "_PyThreadState_UncheckedGet") &&
      resolve(a->tstate_frame, "PyThreadState_GetFrame") &&
      resolve(a->frame_back, "PyFrame_GetBack") && resolve(a->frame_code, "PyFrame_GetCode") &&
      resolve(a->frame_line, "PyFrame_GetLineNumber") && resolve(a->incref, "Py_IncRef") &&
      resolve(a->decref, "Py_DecRef") && resolve(a->get_attr, "PyObject_GetAttrString") &&
      resolve(a->as_utf8, "PyUnicode_AsUTF8AndSize") &&
      resolve(a->err_occurred, "PyErr_Occurred") && resolve(a->err_fetch, "PyErr_Fetch") &&
      resolve(a->err_restore, "PyErr_Restore") && resolve(a->err_clear, "PyErr_Clear") &&
      resolve(a->gc_disable, "PyGC_Disable") && resolve(a->gc_enable, "PyGC_Enable");
  if (ok && minor >= 11) resolve(a->frame_lasti, "PyFrame_GetLasti");
  if (!ok) {
    delete a;
    return nullptr;
  }
  return a;
}

// Code object -> string id of "file\0function", for one string table (ctx), and (code object,
// instruction offset) -> line. Open addressing, never deleted from; each cached code object is
// kept alive by a reference the cache holds, so no other code object can take its address:
// lines are cached only for those. Used with the GIL held, by one capture at a time (the lock
// covers several interpreters with their own GILs; a capture that finds it busy goes without).
class frame_cache {
public:
  static constexpr unsigned k_bits = 13;
  static constexpr std::uint32_t k_slots = 1u << k_bits;
  static constexpr std::uint32_t k_max_used = k_slots / 2;
  static constexpr unsigned k_line_bits = 14;

  bool try_lock() noexcept { return mu_.try_lock(); }
  void unlock() noexcept { mu_.unlock(); }

  // With the lock held: the id of a cached code object, 0 when not cached.
  std::uint32_t find(void* ctx, void* code) const noexcept {
    if (ctx != ctx_) return 0;
    for (std::uint64_t i = index(code), n = 0; n < k_slots; i = (i + 1) & (k_slots - 1), ++n) {
      if (codes_[i] == code) return ids_[i];
      if (codes_[i] == nullptr) return 0;
    }
    return 0;
  }
  // With the lock held. Keeps `code` alive (incref) when it is cached; a full cache just does
  // not cache.
  void insert(const cpython_api& api, void* ctx, void* code, std::uint32_t id) noexcept {
    if (ctx != ctx_) { // a new string table (tests make several writers): forget the old ids
      for (std::uint32_t i = 0; i < k_slots; ++i)
        if (codes_[i]) api.decref(codes_[i]), codes_[i] = nullptr;
      for (auto& l : lines_)
        l = {};
      used_ = 0;
      ctx_ = ctx;
    }
    if (used_ >= k_max_used) return;
    std::uint64_t i = index(code);
    while (codes_[i] != nullptr && codes_[i] != code)
      i = (i + 1) & (k_slots - 1);
    if (codes_[i] == code) return;
    api.incref(code);
    codes_[i] = code;
    ids_[i] = id;
    ++used_;
  }
  // With the lock held, for a code object find() returned: its line at `lasti`, 0 = unknown.
  std::uint32_t line(void* code, int lasti) const noexcept {
    const line_entry& e = lines_[line_index(code, lasti)];
    return e.code == code && e.lasti == lasti ? e.line : 0;
  }
  void set_line(void* code, int lasti, std::uint32_t line) noexcept {
    lines_[line_index(code, lasti)] = {code, lasti, line};
  }

private:
  struct line_entry {
    void* code = nullptr;
    int lasti = 0;
    std::uint32_t line = 0;
  };
  static std::uint64_t index(void* code) noexcept {
    return layout::hash_index(reinterpret_cast<std::uintptr_t>(code), k_bits);
  }
  static std::uint64_t line_index(void* code, int lasti) noexcept {
    return layout::hash_index(reinterpret_cast<std::uintptr_t>(code) ^
                                  (static_cast<std::uint64_t>(static_cast<unsigned>(lasti)) << 40),
                              k_line_bits);
  }
  spin_mutex mu_;
  void* ctx_ = nullptr;
  std::uint32_t used_ = 0;
  void* codes_[k_slots] = {};
  std::uint32_t ids_[k_slots] = {};
  line_entry lines_[1u << k_line_bits] = {};
};

frame_cache& cache() {
  static auto* c = new frame_cache(); // leaked: see g_api
  return *c;
}

// A str attribute of a code object as UTF-8, "" when absent or not encodable.
std::string text_attr(const cpython_api& api, void* code, const char* name) {
  std::string out;
  if (void* v = api.get_attr(code, name)) {
    ssize_t n = 0;
    if (const char* s = api.as_utf8(v, &n); s && n > 0) out.assign(s, static_cast<std::size_t>(n));
    api.decref(v);
  }
  if (api.err_occurred()) api.err_clear();
  return out;
}

// Interns "file\0function" of a code object not in the cache.
std::uint32_t intern_location(const cpython_api& api, void* code, python_intern_fn intern,
                              void* ctx) {
  std::string text = text_attr(api, code, "co_filename");
  if (text.empty()) text = "?";
  std::string function = api.minor >= 11 ? text_attr(api, code, "co_qualname") : std::string();
  if (function.empty()) function = text_attr(api, code, "co_name");
  if (function.empty()) function = "?";
  text += '\0';
  text += function;
  return intern(ctx, text);
}

// One frame's word. `locked`: this capture holds the cache lock.
std::uint64_t frame_word(const cpython_api& api, void* frame, bool locked, python_intern_fn intern,
                         void* ctx) {
  void* code = api.frame_code(frame);
  if (!code) return pw::frame(0, 0);
  frame_cache& c = cache();
  std::uint32_t id = locked ? c.find(ctx, code) : 0;
  const bool cached = id != 0;
  if (!cached) {
    id = intern_location(api, code, intern, ctx);
    if (locked && id != 0) c.insert(api, ctx, code, id);
  }
  // The line: computing it walks the code object's line table (the most costly step);
  // cached by instruction offset for pinned code objects (3.11+: PyFrame_GetLasti).
  std::uint32_t line = 0;
  int lasti = -1;
  if (cached && api.frame_lasti) {
    lasti = api.frame_lasti(frame);
    line = c.line(code, lasti);
  }
  if (line == 0) {
    const int l = api.frame_line(frame);
    line = l < 0 ? 0u : static_cast<std::uint32_t>(l);
    if (cached && api.frame_lasti && line != 0) c.set_line(code, lasti, line);
  }
  api.decref(code); // the frame holds it
  return pw::frame(id, line);
}

} // namespace

bool python_init() noexcept {
  static std::mutex mu;
  if (g_api.load(std::memory_order_acquire)) return true;
  std::lock_guard lock(mu);
  if (g_api.load()) return true;
  static bool registered = false;
  if (!registered) {
    registered = true;
    pthread_atfork(nullptr, nullptr, &on_fork_child);
  }
  try {
    g_api.store(load_api(), std::memory_order_release);
  } catch (...) {
  }
  return g_api.load() != nullptr;
}

python_capture capture_python(std::uint64_t* out, unsigned max, unsigned* written,
                              python_intern_fn intern, void* ctx) noexcept {
  *written = 0;
  const cpython_api* api = g_api.load(std::memory_order_acquire);
  if (!api || max == 0 || g_forked.load(std::memory_order_relaxed)) return python_capture::absent;
  // Order matters: PyGILState_Check answers 1 before initialization (3.10), and only with the
  // GIL held does "not finalizing" stay true while we walk.
  if (!api->is_initialized()) return python_capture::finalizing;
  if (!api->gil_check() || api->tstate_unchecked() == nullptr) return python_capture::no_gil;
  if (api->is_finalizing()) return python_capture::finalizing;
  // The walk may create frame objects (3.11+): with the collector off, that cannot run a
  // collection, hence no finalizer (no arbitrary code) inside the allocation hook. Keep the
  // program's pending exception, if any, and leave none of ours behind.
  const int gc_was_on = api->gc_disable();
  void *type = nullptr, *value = nullptr, *tb = nullptr;
  const bool pending = api->err_occurred() != nullptr;
  if (pending) api->err_fetch(&type, &value, &tb);
  const bool locked = cache().try_lock();
  unsigned n = 0;
  try {
    void* frame = api->tstate_frame(api->tstate_unchecked());
    while (frame && n < max) {
      out[n++] = frame_word(*api, frame, locked, intern, ctx);
      void* back = api->frame_back(frame);
      api->decref(frame); // the interpreter's frame keeps it
      frame = back;
    }
    if (frame) api->decref(frame);
  } catch (...) { // std::string in intern_location: no memory; keep the frames so far
  }
  if (locked) cache().unlock();
  if (pending)
    api->err_restore(type, value, tb);
  else if (api->err_occurred())
    api->err_clear();
  if (gc_was_on) api->gc_enable();
  *written = n;
  return python_capture::frames;
}

} // namespace gmem::trace
