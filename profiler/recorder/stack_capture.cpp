#include "profiler/recorder/stack_capture.h"

#include <atomic>
#include <dlfcn.h>
#include <mutex>
#include <string>
#include <unwind.h>

#include "profiler/format/trace_layout.h"
#include "profiler/recorder/cfi_unwind.h"

namespace gmem::trace {

namespace {

using unw_backtrace_fn = int (*)(void**, int);
std::atomic<unw_backtrace_fn> g_unw_backtrace{nullptr};
std::atomic<unwinder_kind> g_kind{unwinder_kind::none};
std::atomic<bool> g_cached_rules{false};
std::atomic<std::uint64_t> g_fallbacks{0}; // counted on the slow path only

struct gcc_walk {
  std::uintptr_t* ips;
  unsigned max;
  unsigned skip;
  unsigned n;
};

_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<gcc_walk*>(arg);
  const std::uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  if (w->skip > 0) {
    --w->skip;
    return _URC_NO_REASON;
  }
  if (w->n >= w->max) return _URC_END_OF_STACK;
  w->ips[w->n++] = ip;
  return _URC_NO_REASON;
}

std::string own_directory() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&init_unwinder), &info) == 0 || !info.dli_fname) return {};
  std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
}

unw_backtrace_fn load_libunwind() {
  static const char* const k_deps[] = {"liblzma.so.5"};
  void* h = open_bundled_library("libunwind.so.8", k_deps, std::size(k_deps));
  if (!h) return nullptr;
  return reinterpret_cast<unw_backtrace_fn>(dlsym(h, "unw_backtrace"));
}

} // namespace

void* open_bundled_library(const char* soname, const char* const* deps, std::size_t ndeps) {
  if (void* h = dlopen(soname, RTLD_NOW | RTLD_LOCAL)) return h;
  const std::string dir = own_directory();
  if (dir.empty()) return nullptr;
  for (std::size_t i = 0; i < ndeps; ++i)
    dlopen((dir + deps[i]).c_str(), RTLD_NOW | RTLD_LOCAL);
  return dlopen((dir + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
}

const char* to_string(unwinder_kind k) noexcept {
  switch (k) {
  case unwinder_kind::none:
    return "none";
  case unwinder_kind::libunwind:
    return "libunwind";
  case unwinder_kind::libgcc:
    return "libgcc";
  }
  return "unknown";
}

bool cached_rules_enabled() noexcept {
  return g_cached_rules.load(std::memory_order_relaxed);
}

std::uint64_t capture_fallbacks() noexcept {
  return g_fallbacks.load(std::memory_order_relaxed);
}

unwinder_kind init_unwinder(bool prefer_libgcc, bool cached_rules) noexcept {
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (g_kind.load() != unwinder_kind::none) return g_kind.load();
  g_cached_rules.store(cached_rules && cfi_unwind_init(), std::memory_order_relaxed);
  unw_backtrace_fn fn = nullptr;
  try {
    if (!prefer_libgcc) fn = load_libunwind();
  } catch (...) {
  }
  g_unw_backtrace.store(fn, std::memory_order_release);
  g_kind.store(fn ? unwinder_kind::libunwind : unwinder_kind::libgcc);
  return g_kind.load();
}

__attribute__((noinline)) unsigned capture_ips(std::uintptr_t* ips, unsigned max,
                                               unsigned skip) noexcept {
  skip += 1; // this function's own frame
  if (max == 0) return 0;
  void* buf[layout::k_max_stack_depth + 16];
  const unsigned want = std::min<unsigned>(max + skip, layout::k_max_stack_depth + 16);
  auto copy_out = [&](int got) {
    unsigned n = 0;
    for (unsigned i = skip; got > 0 && i < static_cast<unsigned>(got) && n < max; ++i)
      ips[n++] = reinterpret_cast<std::uintptr_t>(buf[i]);
    return n;
  };
  if (g_cached_rules.load(std::memory_order_relaxed)) {
    static_assert(sizeof(void*) == sizeof(std::uintptr_t));
    const int got = cfi_backtrace(reinterpret_cast<std::uintptr_t*>(buf), want);
    if (got >= 0) return copy_out(got);
    g_fallbacks.fetch_add(1, std::memory_order_relaxed);
  }
  if (auto fn = g_unw_backtrace.load(std::memory_order_acquire)) {
    return copy_out(fn(buf, static_cast<int>(want)));
  }
  gcc_walk w{ips, max, skip, 0};
  _Unwind_Backtrace(on_frame, &w);
  return w.n;
}

} // namespace gmem::trace
