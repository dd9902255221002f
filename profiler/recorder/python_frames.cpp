#include "profiler/recorder/python_frames.h"

#include <atomic>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <mutex>
#include <pthread.h>
#include <string>

#include "common/spin_mutex.h"
#include "profiler/format/trace_layout.h"
#include "profiler/recorder/python_frame_memo.h"

namespace gmem::trace {

namespace {

namespace pw = layout::python_word;

// Where each supported version keeps what the walk reads, in bytes (LP64: x86-64 and aarch64
// lay these structures out alike). Taken from each version's headers (3.11 checked once
// against them with offsetof; the others from their published structure definitions) and
// checked at run time as the header comment says. -1: the version has no such field.
struct layout_of {
  int minor;
  std::int16_t tstate_interp; // PyThreadState.interp
  std::int16_t tstate_frame;  // .frame (3.10), .cframe (3.11, 3.12), .current_frame (3.13)
  std::int16_t cframe_frame;  // _PyCFrame.current_frame; -1: tstate_frame is the frame
  std::int16_t frame_code;    // PyFrameObject.f_code (3.10), _PyInterpreterFrame.f_code /
                              // .f_executable (3.13)
  std::int16_t frame_back;    // .f_back (3.10), .previous
  std::int16_t frame_instr;   // int .f_lasti in code units (3.10), else .prev_instr /
                              // .instr_ptr (3.13): a pointer into the code's instructions
  std::int16_t frame_owner;   // char .owner (3.11+)
  std::int16_t code_filename, code_name, code_qualname, code_linetable;
  std::int16_t code_units;       // co_code_adaptive, the instructions (3.11+)
  std::int16_t str_ascii_data;   // sizeof(PyASCIIObject): a compact ASCII string's characters
  std::int16_t str_compact_data; // sizeof(PyCompactUnicodeObject): other compact strings'
};
constexpr layout_of k_layouts[] = {
    {10, 16, 24, -1, 32, 24, 96, -1, 104, 112, -1, 120, -1, 48, 72},
    {11, 16, 56, 8, 32, 48, 56, 69, 112, 120, 128, 136, 184, 48, 72},
    {12, 16, 56, 0, 0, 8, 56, 70, 112, 120, 128, 136, 192, 40, 56},
    {13, 16, 72, -1, 0, 8, 56, 70, 112, 120, 128, 136, 200, 40, 56},
};
// Common to all: PyObject.ob_type at 8, PyVarObject.ob_size at 16 (a code object's size in
// code units, 3.11+), a string's length at 16 and its state bits at 32.
constexpr std::size_t k_ob_type = 8, k_ob_size = 16, k_str_length = 16, k_str_state = 32;
constexpr char k_owner_cstub = 3; // FRAME_OWNED_BY_CSTUB (3.12+): the C-entry trampoline
constexpr unsigned k_max_steps = 4 * layout::k_max_python_depth; // frames skipped included
constexpr std::size_t k_max_text = 4096;                         // bytes of a file or function

struct cpython_api {
  const layout_of* layout = nullptr;
  int (*is_initialized)() = nullptr;
  int (*is_finalizing)() = nullptr;       // _Py_IsFinalizing (3.10-3.12), Py_IsFinalizing (3.13)
  void* (*this_thread_state)() = nullptr; // PyGILState_GetThisThreadState: no GIL needed
  void* (*main_interpreter)() = nullptr;  // PyInterpreterState_Main
  int (*addr2line)(void*, int) = nullptr; // PyCode_Addr2Line: reads the line table only
  const void* code_type = nullptr;        // &PyCode_Type
  const void* str_type = nullptr;         // &PyUnicode_Type
};

std::atomic<const cpython_api*> g_api{nullptr};
std::atomic<bool> g_forked{false};

void on_fork_child() {
  g_forked.store(true, std::memory_order_relaxed);
}

template <typename T> T field(const void* base, std::ptrdiff_t offset) noexcept {
  T v;
  std::memcpy(&v, static_cast<const char*>(base) + offset, sizeof v);
  return v;
}

// A pointer worth following: non-null, aligned, in the user half of the address space.
bool plausible(const void* p) noexcept {
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  return v >= 4096 && v % alignof(void*) == 0 && v < (std::uintptr_t{1} << 47);
}

template <typename F> bool resolve(F& fn, const char* name, const char* alt = nullptr) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (!p && alt) p = dlsym(RTLD_DEFAULT, alt);
  fn = reinterpret_cast<F>(p);
  return p != nullptr;
}

// "3.12.3 (main, ...) [GCC ...]" -> its layout for 3.10..3.13 with a GIL; nullptr otherwise.
const layout_of* layout_for(const char* version) {
  if (!version) return nullptr;
  int major = 0, minor = 0;
  if (std::sscanf(version, "%d.%d", &major, &minor) != 2 || major != 3) return nullptr;
  if (std::strstr(version, "free-threading")) return nullptr; // other layouts, no GIL
  for (const layout_of& l : k_layouts)
    if (l.minor == minor) return &l;
  return nullptr;
}

const cpython_api* load_api() {
  const char* (*get_version)() = nullptr;
  if (!resolve(get_version, "Py_GetVersion")) return nullptr;
  const layout_of* layout = layout_for(get_version());
  if (!layout) return nullptr;
  auto* a = new cpython_api(); // leaked: hooks may run during and after exit
  a->layout = layout;
  a->code_type = dlsym(RTLD_DEFAULT, "PyCode_Type");
  a->str_type = dlsym(RTLD_DEFAULT, "PyUnicode_Type");
  const bool ok =
      resolve(a->is_initialized, "Py_IsInitialized") &&
      resolve(a->is_finalizing, layout->minor >= 13 ? "Py_IsFinalizing" : "_Py_IsFinalizing",
              "_Py_IsFinalizing") &&
      resolve(a->this_thread_state, "PyGILState_GetThisThreadState") &&
      resolve(a->main_interpreter, "PyInterpreterState_Main") &&
      resolve(a->addr2line, "PyCode_Addr2Line") && a->code_type && a->str_type;
  if (!ok) {
    delete a;
    return nullptr;
  }
  return a;
}

// A str object's text as UTF-8 (compact strings: all that code objects hold); false when it
// is not a str or not compact.
bool read_text(const cpython_api& api, const void* s, std::string& out) {
  if (!plausible(s) || field<const void*>(s, k_ob_type) != api.str_type) return false;
  const auto length = field<std::int64_t>(s, k_str_length);
  const auto state = field<std::uint32_t>(s, k_str_state);
  const unsigned kind = (state >> 2) & 7, compact = (state >> 5) & 1, ascii = (state >> 6) & 1;
  if (!compact || length < 0 || (kind != 1 && kind != 2 && kind != 4)) return false;
  const auto n =
      static_cast<std::size_t>(length) < k_max_text ? static_cast<std::size_t>(length) : k_max_text;
  const char* data = static_cast<const char*>(s) +
                     (ascii ? api.layout->str_ascii_data : api.layout->str_compact_data);
  if (ascii) {
    out.assign(data, n);
    return true;
  }
  out.clear();
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t c = kind == 1   ? field<std::uint8_t>(data, static_cast<std::ptrdiff_t>(i))
                      : kind == 2 ? field<std::uint16_t>(data, static_cast<std::ptrdiff_t>(2 * i))
                                  : field<std::uint32_t>(data, static_cast<std::ptrdiff_t>(4 * i));
    if (c > 0x10ffff || (c >= 0xd800 && c < 0xe000)) c = 0xfffd; // lone surrogates
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return true;
}

// What identifies a code object's location while it lives: the code object and the objects
// it names. A later code object at a dead one's address has other ones.
struct code_key {
  const void* code = nullptr;
  const void* filename = nullptr;
  const void* function = nullptr; // co_qualname, co_name (3.10)
  const void* linetable = nullptr;
  bool operator==(const code_key&) const = default;
};

// code_key -> string id of "file\0function", for one string table (ctx), and (code_key,
// instruction offset) -> line. Open addressing; emptied when half full. Used by one capture at
// a time (a capture that finds it busy goes without).
class frame_cache {
public:
  static constexpr unsigned k_bits = 13;
  static constexpr std::uint32_t k_slots = 1u << k_bits;
  static constexpr std::uint32_t k_max_used = k_slots / 2;
  static constexpr unsigned k_line_bits = 14;

  bool try_lock() noexcept { return mu_.try_lock(); }
  void unlock() noexcept { mu_.unlock(); }

  // With the lock held: the id of a cached location, 0 when not cached.
  std::uint32_t find(void* ctx, const code_key& k) const noexcept {
    if (ctx != ctx_) return 0;
    for (std::uint64_t i = index(k.code), n = 0; n < k_slots; i = (i + 1) & (k_slots - 1), ++n) {
      if (slots_[i].key.code == nullptr) return 0;
      if (slots_[i].key == k) return slots_[i].id;
    }
    return 0;
  }
  void insert(void* ctx, const code_key& k, std::uint32_t id) noexcept {
    if (ctx != ctx_ || used_ >= k_max_used) { // a new string table (tests make several), or full
      for (auto& s : slots_)
        s = {};
      for (auto& l : lines_)
        l = {};
      used_ = 0;
      ctx_ = ctx;
    }
    std::uint64_t i = index(k.code);
    while (slots_[i].key.code != nullptr && slots_[i].key.code != k.code)
      i = (i + 1) & (k_slots - 1);
    if (slots_[i].key.code == nullptr) ++used_;
    slots_[i] = {k, id}; // a dead code object's entry at this address is replaced
  }
  // With the lock held: the line at byte offset `addr` of a cached location, 0 = unknown.
  std::uint32_t line(const code_key& k, int addr) const noexcept {
    const line_entry& e = lines_[line_index(k.code, addr)];
    return e.code == k.code && e.linetable == k.linetable && e.addr == addr ? e.line : 0;
  }
  void set_line(const code_key& k, int addr, std::uint32_t line) noexcept {
    lines_[line_index(k.code, addr)] = {k.code, k.linetable, addr, line};
  }

private:
  struct slot {
    code_key key;
    std::uint32_t id = 0;
  };
  struct line_entry {
    const void* code = nullptr;
    const void* linetable = nullptr;
    int addr = 0;
    std::uint32_t line = 0;
  };
  static std::uint64_t index(const void* code) noexcept {
    return layout::hash_index(reinterpret_cast<std::uintptr_t>(code), k_bits);
  }
  static std::uint64_t line_index(const void* code, int addr) noexcept {
    return layout::hash_index(reinterpret_cast<std::uintptr_t>(code) ^
                                  (static_cast<std::uint64_t>(static_cast<unsigned>(addr)) << 40),
                              k_line_bits);
  }
  spin_mutex mu_;
  void* ctx_ = nullptr;
  std::uint32_t used_ = 0;
  slot slots_[k_slots] = {};
  line_entry lines_[1u << k_line_bits] = {};
};

frame_cache& cache() {
  static auto* c = new frame_cache(); // leaked: see g_api
  return *c;
}

// Interns "file\0function" of a location not in the cache.
std::uint32_t intern_location(const cpython_api& api, const code_key& k, python_intern_fn intern,
                              void* ctx) {
  std::string text, function;
  if (!read_text(api, k.filename, text) || text.empty()) text = "?";
  if (!read_text(api, k.function, function) || function.empty()) function = "?";
  text += '\0';
  text += function;
  return intern(ctx, text);
}

// The word of the frame running `code` at byte offset `addr`. `locked`: this capture holds the
// cache lock.
std::uint64_t frame_word(const cpython_api& api, const char* code, int addr, bool locked,
                         python_intern_fn intern, void* ctx) {
  const layout_of& l = *api.layout;
  const code_key k{code, field<const void*>(code, l.code_filename),
                   field<const void*>(code, l.code_qualname >= 0 ? l.code_qualname : l.code_name),
                   field<const void*>(code, l.code_linetable)};
  frame_cache& c = cache();
  std::uint32_t id = locked ? c.find(ctx, k) : 0;
  if (id == 0) {
    id = intern_location(api, k, intern, ctx);
    if (locked && id != 0) c.insert(ctx, k, id);
  }
  std::uint32_t line = locked ? c.line(k, addr) : 0; // the line table walk costs most
  if (line == 0) {
    const int found = api.addr2line(const_cast<char*>(code), addr);
    line = found < 0 ? 0u : static_cast<std::uint32_t>(found);
    if (locked && line != 0) c.set_line(k, addr, line);
  }
  return pw::frame(id, line);
}

// The byte offset of the instruction `frame` runs in `code`, or INT32_MIN when the frame does
// not hold a plausible one (-2: not started yet, which the line table answers with the first
// line).
int instruction_offset(const layout_of& l, const char* frame, const char* code) {
  if (l.code_units < 0) return 2 * field<int>(frame, l.frame_instr); // 3.10: f_lasti
  const auto* instr = field<const char*>(frame, l.frame_instr);
  const std::ptrdiff_t addr = instr - (code + l.code_units);
  const auto units = field<std::int64_t>(code, k_ob_size);
  if (addr < -2 || addr % 2 != 0 || units <= 0 || addr >= 2 * units) return INT32_MIN;
  return static_cast<int>(addr);
}

// The frame's own record of where it runs (f_lasti in 3.10, else the instruction pointer),
// read from the frame alone: compared with the last capture's before the code object is read.
std::intptr_t raw_instruction(const layout_of& l, const char* frame) {
  if (l.code_units < 0) return field<int>(frame, l.frame_instr);
  return reinterpret_cast<std::intptr_t>(field<const char*>(frame, l.frame_instr));
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

// Whether the program's code was seen running (python_program_ended): 0 not seen running, 1 seen
// running (by a free or by a capture of its frames), 2 ended.
namespace {
std::atomic<int> g_program_state{0};
} // namespace

bool python_program_ended() noexcept {
  std::atomic<int>& state = g_program_state;
  const int seen = state.load(std::memory_order_relaxed);
  if (seen == 2) return true;
  const cpython_api* api = g_api.load(std::memory_order_acquire);
  if (!api || g_forked.load(std::memory_order_relaxed)) return false;
  if (api->is_initialized() && !api->is_finalizing()) {
    if (seen == 0) state.store(1, std::memory_order_relaxed);
    return false;
  }
  if (seen == 0) return false; // not initialized yet: nothing of the program ran
  state.store(2, std::memory_order_relaxed);
  return true;
}

python_capture capture_python(std::uint64_t* out, unsigned max, unsigned* written,
                              python_intern_fn intern, void* ctx) noexcept {
  *written = 0;
  const cpython_api* api = g_api.load(std::memory_order_acquire);
  if (!api || max == 0 || g_forked.load(std::memory_order_relaxed)) return python_capture::absent;
  if (!api->is_initialized() || api->is_finalizing()) return python_capture::finalizing;
  // The program runs: a later free during the interpreter's shutdown releases what it held,
  // though it may never have freed anything before.
  if (g_program_state.load(std::memory_order_relaxed) == 0)
    g_program_state.store(1, std::memory_order_relaxed);
  const layout_of& l = *api->layout;
  const void* tstate = api->this_thread_state();
  if (!plausible(tstate) || field<void*>(tstate, l.tstate_interp) != api->main_interpreter())
    return python_capture::no_gil;
  const char* frame = field<const char*>(tstate, l.tstate_frame);
  if (l.cframe_frame >= 0 && plausible(frame)) frame = field<const char*>(frame, l.cframe_frame);
  // Frames met before (python_frame_memo.h) cost the frame's fields and its code object's
  // line-table pointer; the rest go through the shared cache and its lock.
  python_frame_memo* memo = python_frame_memo::mine();
  if (memo != nullptr) memo->use(ctx);
  bool locked = false, tried = false; // the shared cache's lock, taken at the first miss
  unsigned n = 0;
  try {
    for (unsigned step = 0; plausible(frame) && n < max && step < k_max_steps; ++step) {
      const char* back = field<const char*>(frame, l.frame_back);
      if (l.frame_owner >= 0 && field<char>(frame, l.frame_owner) == k_owner_cstub) {
        frame = back;
        continue;
      }
      const char* code = field<const char*>(frame, l.frame_code);
      if (!plausible(code)) break;
      // Decided before the code object's header is read (its type and size were checked when
      // the entry was made).
      const python_frame_memo::key k{frame, code, field<const void*>(code, l.code_linetable),
                                     raw_instruction(l, frame)};
      if (const std::uint64_t known = memo != nullptr ? memo->find(k) : 0) {
        out[n++] = known;
      } else {
        if (field<const void*>(code, k_ob_type) != api->code_type) break;
        const int addr = instruction_offset(l, frame, code);
        if (addr == INT32_MIN) break;
        if (!tried) {
          tried = true;
          locked = cache().try_lock();
        }
        const std::uint64_t word = frame_word(*api, code, addr, locked, intern, ctx);
        if (memo != nullptr && pw::location_of(word) != 0) memo->store(k, word);
        out[n++] = word;
      }
      frame = back;
    }
  } catch (...) { // std::string in intern_location: no memory; keep the frames so far
  }
  if (locked) cache().unlock();
  *written = n;
  return n > 0 ? python_capture::frames : python_capture::no_gil;
}

} // namespace gmem::trace
