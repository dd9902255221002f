#include "interpose/real_driver.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <mutex>

// Read by the dlsym trampoline (hooks_entry.cpp) without calling into C++.
extern "C" {
__attribute__((visibility("hidden"))) void* g_gmem_real_dlsym = nullptr;
}

namespace gmem::shim {

std::atomic<const real_driver*> g_driver{nullptr};

namespace {

enum flavour { any, legacy, per_thread };

struct substitution {
  void* real;
  void* ours;
};

// Invariant once published: sorted by `real`, no duplicates, never modified again.
struct substitution_table {
  std::array<substitution, 256> rows{};
  std::size_t count = 0;
  void add(void* real, void* ours) {
    if (real == nullptr || real == ours || count == rows.size()) return;
    for (std::size_t i = 0; i < count; ++i) {
      if (rows[i].real == real) return; // first row wins (the list has no overlaps)
    }
    rows[count++] = {real, ours};
  }
  void seal() {
    std::sort(rows.begin(), rows.begin() + static_cast<std::ptrdiff_t>(count),
              [](const substitution& a, const substitution& b) { return a.real < b.real; });
  }
  void* find(void* real) const {
    auto end = rows.begin() + static_cast<std::ptrdiff_t>(count);
    auto it = std::lower_bound(rows.begin(), end, real,
                               [](const substitution& s, void* a) { return s.real < a; });
    return it != end && it->real == real ? it->ours : nullptr;
  }
};

std::mutex g_load_mu;
std::atomic<const substitution_table*> g_table{nullptr};
bool g_load_failed = false; // guarded by g_load_mu
std::atomic<std::uint64_t> g_by_dlsym{0};
std::atomic<std::uint64_t> g_by_proc{0};

void add_row(substitution_table& table, const real_driver& real, const char* exported,
             const char* base, int min_version, flavour f, void* ours) {
  table.add(real_dlsym()(real.handle, exported), ours);
  if (real.cuGetProcAddress_v2 == nullptr) return;
  const cuuint64_t legacy_flags[] = {CU_GET_PROC_ADDRESS_DEFAULT,
                                     CU_GET_PROC_ADDRESS_LEGACY_STREAM};
  const cuuint64_t ptsz_flags[] = {CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
  const cuuint64_t any_flags[] = {CU_GET_PROC_ADDRESS_DEFAULT, CU_GET_PROC_ADDRESS_LEGACY_STREAM,
                                  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM};
  const cuuint64_t* flags = f == legacy ? legacy_flags : f == per_thread ? ptsz_flags : any_flags;
  const std::size_t n = f == legacy ? 2 : f == per_thread ? 1 : 3;
  for (std::size_t i = 0; i < n; ++i) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult status{};
    if (real.cuGetProcAddress_v2(base, &p, min_version, flags[i], &status) == CUDA_SUCCESS) {
      table.add(p, ours);
    }
  }
}

template <typename F>
void ask_driver(const real_driver& real, const char* name, int version, F& fn) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult status{};
  if (real.cuGetProcAddress_v2(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) ==
          CUDA_SUCCESS &&
      status == CU_GET_PROC_ADDRESS_SUCCESS) {
    fn = reinterpret_cast<F>(p);
  }
}

// Both or neither: a barrier needs the record and the wait.
void resolve_context_barrier(real_driver& real) {
  if (real.cuGetProcAddress_v2 == nullptr) return;
  ask_driver(real, "cuCtxRecordEvent", 12050, real.cuCtxRecordEvent);
  ask_driver(real, "cuCtxWaitEvent", 12050, real.cuCtxWaitEvent);
  if (real.cuCtxRecordEvent == nullptr || real.cuCtxWaitEvent == nullptr) {
    real.cuCtxRecordEvent = nullptr;
    real.cuCtxWaitEvent = nullptr;
  }
}

const real_driver* load_locked() {
  if (const real_driver* d = g_driver.load(std::memory_order_acquire)) return d;
  if (g_load_failed) return nullptr;
  dlsym_fn sym = real_dlsym();
  void* handle = sym != nullptr ? dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL) : nullptr;
  if (handle == nullptr) {
    g_load_failed = true;
    const char* why = sym != nullptr ? dlerror() : "glibc's dlsym was not found";
    std::fprintf(stderr, "gmem: warning: cannot load libcuda.so.1 (%s); calls pass through\n",
                 why != nullptr ? why : "unknown reason");
    return nullptr;
  }
  auto* real = new real_driver; // immutable once published; never freed (hooks run at exit)
  real->handle = handle;
#define GMEM_RESOLVE(name, ...)                                                                    \
  real->name = reinterpret_cast<decltype(real->name)>(sym(handle, #name));
  GMEM_HOOKS(GMEM_RESOLVE)
  GMEM_REAL_ONLY(GMEM_RESOLVE)
#undef GMEM_RESOLVE
  resolve_context_barrier(*real);
  auto* table = new substitution_table;
#define GMEM_SUBSTITUTE(name, base, version, flav)                                                 \
  add_row(*table, *real, #name, base, version, flav, reinterpret_cast<void*>(&::name));
  GMEM_HOOKS(GMEM_SUBSTITUTE)
#undef GMEM_SUBSTITUTE
  table->seal();
  g_table.store(table, std::memory_order_release);
  g_driver.store(real, std::memory_order_release);
  return real;
}

} // namespace

dlsym_fn real_dlsym() {
  void* p = __atomic_load_n(&g_gmem_real_dlsym, __ATOMIC_ACQUIRE);
  if (p == nullptr) {
    p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
    if (p == nullptr) p = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
    if (p == nullptr) {
      // Not preloaded (dlopen()ed after libc): "next" finds nothing, but then our dlsym is
      // not first in the global scope either, so the default lookup finds glibc's.
      void* found = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
      if (found != reinterpret_cast<void*>(&::dlsym)) p = found;
    }
    __atomic_store_n(&g_gmem_real_dlsym, p, __ATOMIC_RELEASE);
  }
  return reinterpret_cast<dlsym_fn>(p);
}

const real_driver* driver_load() {
  std::lock_guard lock(g_load_mu);
  return load_locked();
}

const real_driver* driver_if_resolved() {
  return g_driver.load(std::memory_order_acquire);
}

const real_driver* driver_if_loaded() {
  if (const real_driver* d = g_driver.load(std::memory_order_acquire)) return d;
  void* loaded = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (loaded == nullptr) return nullptr;
  dlclose(loaded);
  return driver();
}

void* substitute(void* address) {
  const substitution_table* table = g_table.load(std::memory_order_acquire);
  if (table == nullptr || address == nullptr) return address;
  void* ours = table->find(address);
  return ours != nullptr ? ours : address;
}

void count_substitution(bool by_dlsym) {
  (by_dlsym ? g_by_dlsym : g_by_proc).fetch_add(1, std::memory_order_relaxed);
}

substitution_counts substitutions() {
  return {g_by_dlsym.load(std::memory_order_relaxed), g_by_proc.load(std::memory_order_relaxed)};
}

bool is_primary_context(const real_driver& real, CUcontext ctx, int device) {
  unsigned flags = 0;
  int active = 0;
  if (real.cuDevicePrimaryCtxGetState == nullptr || real.cuDevicePrimaryCtxRetain == nullptr ||
      real.cuDevicePrimaryCtxRelease_v2 == nullptr ||
      real.cuDevicePrimaryCtxGetState(device, &flags, &active) != CUDA_SUCCESS || active == 0) {
    return false; // an inactive primary context is not `ctx`; retaining it would create it
  }
  CUcontext primary = nullptr;
  if (real.cuDevicePrimaryCtxRetain(&primary, device) != CUDA_SUCCESS) return false;
  (void)real.cuDevicePrimaryCtxRelease_v2(device);
  return primary == ctx;
}

} // namespace gmem::shim
