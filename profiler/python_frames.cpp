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
      resolve(a->err_restore, "PyErr_Restore") && resolve(a->err_clear, "PyErr_Clear");
  if (!ok) {
    delete a;
    return nullptr;
  }
  return a;
}

// Code object -> string id of "file\0function", for one string table (ctx). Open addressing,
// never deleted from; each key holds a reference to its code object, so no other code object
// can take its address while it is cached. Used only with the GIL held; the lock covers
// several interpreters (each with its own GIL) in one process.
class location_cache {
public:
  static constexpr std::uint32_t k_slots = 8192; // power of two
  static constexpr std::uint32_t k_max_used = k_slots / 2;

  std::uint32_t find(void* ctx, void* code) noexcept {
    std::lock_guard lock(mu_);
    if (ctx != ctx_) return 0;
    for (std::uint64_t i = index(code), n = 0; n < k_slots; i = (i + 1) & (k_slots - 1), ++n) {
      if (codes_[i] == code) return ids_[i];
      if (codes_[i] == nullptr) return 0;
    }
    return 0;
  }
  // Keeps `code` alive (incref) when it is cached; a full cache just does not cache.
  void insert(const cpython_api& api, void* ctx, void* code, std::uint32_t id) noexcept {
    std::lock_guard lock(mu_);
    if (ctx != ctx_) { // a new string table (tests make several writers): forget the old ids
      for (std::uint32_t i = 0; i < k_slots; ++i)
        if (codes_[i]) api.decref(codes_[i]), codes_[i] = nullptr;
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

private:
  static std::uint64_t index(void* code) noexcept {
    return layout::hash_index(reinterpret_cast<std::uintptr_t>(code), 13);
  }
  spin_mutex mu_;
  void* ctx_ = nullptr;
  std::uint32_t used_ = 0;
  void* codes_[k_slots] = {};
  std::uint32_t ids_[k_slots] = {};
};
static_assert(location_cache::k_slots == 1u << 13);

location_cache& cache() {
  static auto* c = new location_cache(); // leaked: see g_api
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

std::uint32_t location_of(const cpython_api& api, void* code, python_intern_fn intern, void* ctx) {
  if (const std::uint32_t id = cache().find(ctx, code)) return id;
  std::string text = text_attr(api, code, "co_filename");
  if (text.empty()) text = "?";
  std::string function = api.minor >= 11 ? text_attr(api, code, "co_qualname") : std::string();
  if (function.empty()) function = text_attr(api, code, "co_name");
  if (function.empty()) function = "?";
  text += '\0';
  text += function;
  const std::uint32_t id = intern(ctx, text);
  if (id != 0) cache().insert(api, ctx, code, id);
  return id;
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
  try {
    // The walk may create frame objects (3.11+) and fail for lack of memory: keep the
    // program's pending exception, if any, and leave none of ours behind.
    void *type = nullptr, *value = nullptr, *tb = nullptr;
    const bool pending = api->err_occurred() != nullptr;
    if (pending) api->err_fetch(&type, &value, &tb);
    unsigned n = 0;
    void* frame = api->tstate_frame(api->tstate_unchecked());
    while (frame && n < max) {
      void* code = api->frame_code(frame);
      const int line = api->frame_line(frame);
      const std::uint32_t id = code ? location_of(*api, code, intern, ctx) : 0;
      if (code) api->decref(code);
      out[n++] = pw::frame(id, line < 0 ? 0u : static_cast<std::uint32_t>(line));
      void* back = api->frame_back(frame);
      api->decref(frame);
      frame = back;
    }
    if (frame) api->decref(frame);
    if (pending)
      api->err_restore(type, value, tb);
    else if (api->err_occurred())
      api->err_clear();
    *written = n;
  } catch (...) { // std::string in location_of: no memory; the frames so far are lost
    *written = 0;
  }
  return python_capture::frames;
}

} // namespace gmem::trace
