// libgmem_client.so: the gmem_* API for programs that link it. When libgmem.so is preloaded
// (and active) every call is forwarded to the shim's implementation; otherwise the answers
// come from the driver (client/driver.h) and say so (gmem_available() == 0, flags).
//
// Forwarding must find the shim explicitly: a program that links this library normally binds
// gmem_* to the preloaded shim by symbol interposition, but ctypes and dlsym(handle, ...)
// callers reach these definitions directly.
#include "client/abi.h"
#include "client/driver.h"
#include "client/memory_report.h"
#include "gmem/gmem.h"

#include <atomic>
#include <dlfcn.h>

namespace gmem::client {
namespace {

struct shim_api {
  int (*available)();
  gmem_status (*stats)(int, gmem_stats_t*);
  gmem_status (*reset_peak)();
  gmem_status (*empty_cache)();
  gmem_status (*set_limit)(std::uint64_t, int);
  gmem_status (*allocatable_bytes)(int, std::uint64_t*);
  gmem_status (*mark)(const char*);
  gmem_status (*memory_report)(char*, std::size_t);
};

// Any address inside this library. Not &gmem_stats: taking the address of an exported
// function goes through the GOT and yields the preloaded shim's definition when there is one.
void self_anchor() {}

// The definition of `name` that the global scope sees, when it lives in another object than
// this library (that object is libgmem.so).
template <class F> bool find_other(const char* name, F& out) {
  void* p = dlsym(RTLD_DEFAULT, name);
  if (p == nullptr) return false;
  Dl_info theirs{}, ours{};
  if (dladdr(p, &theirs) == 0 || dladdr(reinterpret_cast<void*>(&self_anchor), &ours) == 0)
    return false;
  if (theirs.dli_fbase == ours.dli_fbase) return false;
  out = reinterpret_cast<F>(p);
  return true;
}

const shim_api* find_shim() noexcept {
  static shim_api api{};
  bool all = find_other("gmem_available", api.available) && find_other("gmem_stats", api.stats) &&
             find_other("gmem_reset_peak", api.reset_peak) &&
             find_other("gmem_empty_cache", api.empty_cache) &&
             find_other("gmem_set_limit", api.set_limit) &&
             find_other("gmem_allocatable_bytes", api.allocatable_bytes) &&
             find_other("gmem_mark", api.mark) &&
             find_other("gmem_memory_report", api.memory_report);
  return all ? &api : nullptr;
}

// The shim when it is preloaded and active now (it stands aside in forked children, after
// exit() starts, or when its initialization failed).
const shim_api* shim() noexcept {
  static const shim_api* const s = find_shim();
  return s != nullptr && s->available() == 1 ? s : nullptr;
}

// Advisory limits used without the shim; slot k_max_devices holds the "every device" limit
// set with device -1, which a per-device value overrides.
inline constexpr int k_max_devices = 64;
std::atomic<std::uint64_t> g_limits[k_max_devices + 1];

std::uint64_t advisory_limit(int device) noexcept {
  const std::uint64_t own =
      device >= 0 && device < k_max_devices ? g_limits[device].load(std::memory_order_relaxed) : 0;
  return own != 0 ? own : g_limits[k_max_devices].load(std::memory_order_relaxed);
}

gmem_status driver_stats(int device, gmem_stats_t& s, std::string* name) noexcept {
  const driver& d = driver::get();
  if (!d.loaded()) return GMEM_ERROR_NO_DRIVER;
  device_memory m;
  const gmem_status rc = d.query(d.resolve(device), &m);
  if (rc != GMEM_OK) return rc;
  s = gmem_stats_t{};
  s.struct_size = sizeof(gmem_stats_t);
  s.version = GMEM_STATS_VERSION;
  s.device = m.device;
  s.flags = GMEM_STATS_FROM_DRIVER;
  s.device_total_bytes = m.total_bytes;
  s.device_free_bytes = m.free_bytes;
  s.limit_bytes = advisory_limit(m.device);
  s.allocatable_bytes =
      s.limit_bytes != 0 && s.limit_bytes < m.free_bytes ? s.limit_bytes : m.free_bytes;
  if (name != nullptr) *name = m.name;
  return GMEM_OK;
}

} // namespace
} // namespace gmem::client

using namespace gmem::client;

extern "C" {

GMEM_API const char* gmem_status_name(gmem_status status) {
  return status_name(status);
}

GMEM_API int gmem_available(void) {
  return shim() != nullptr ? 1 : 0;
}

GMEM_API gmem_status gmem_stats(int device, gmem_stats_t* out) {
  if (const shim_api* s = shim()) return s->stats(device, out);
  if (out == nullptr) return GMEM_ERROR_INVALID_ARGUMENT;
  gmem_stats_t st{};
  const gmem_status rc = driver_stats(device, st, nullptr);
  if (rc != GMEM_OK) return rc;
  return copy_stats(st, out);
}

GMEM_API gmem_status gmem_reset_peak(void) {
  if (const shim_api* s = shim()) return s->reset_peak();
  return GMEM_ERROR_NO_SHIM;
}

GMEM_API gmem_status gmem_empty_cache(void) {
  if (const shim_api* s = shim()) return s->empty_cache();
  return GMEM_OK;
}

GMEM_API gmem_status gmem_set_limit(uint64_t bytes, int device) {
  if (const shim_api* s = shim()) return s->set_limit(bytes, device);
  if (device < -1 || device >= k_max_devices) return GMEM_ERROR_INVALID_ARGUMENT;
  if (device == -1) {
    for (auto& l : g_limits)
      l.store(0, std::memory_order_relaxed);
    g_limits[k_max_devices].store(bytes, std::memory_order_relaxed);
  } else {
    g_limits[device].store(bytes, std::memory_order_relaxed);
  }
  return GMEM_OK;
}

GMEM_API gmem_status gmem_allocatable_bytes(int device, uint64_t* out) {
  if (const shim_api* s = shim()) return s->allocatable_bytes(device, out);
  if (out == nullptr) return GMEM_ERROR_INVALID_ARGUMENT;
  gmem_stats_t st{};
  const gmem_status rc = driver_stats(device, st, nullptr);
  if (rc != GMEM_OK) return rc;
  *out = st.allocatable_bytes;
  return GMEM_OK;
}

GMEM_API int gmem_can_allocate(uint64_t bytes, int device) {
  uint64_t avail = 0;
  return gmem_allocatable_bytes(device, &avail) == GMEM_OK && avail >= bytes ? 1 : 0;
}

GMEM_API gmem_status gmem_mark(const char* label) {
  if (const shim_api* s = shim()) return s->mark(label);
  if (label == nullptr) return GMEM_ERROR_INVALID_ARGUMENT;
  return GMEM_ERROR_NO_SHIM;
}

GMEM_API gmem_status gmem_memory_report(char* buf, size_t len) {
  if (const shim_api* s = shim()) return s->memory_report(buf, len);
  if (buf == nullptr || len == 0) return GMEM_ERROR_INVALID_ARGUMENT;
  try {
    std::vector<report_device> devices(1);
    const gmem_status rc = driver_stats(-1, devices[0].stats, &devices[0].name);
    if (rc != GMEM_OK) {
      const driver& d = driver::get();
      std::string text = "gmem memory report (driver figures only; libgmem.so not preloaded)\n"
                         "  no device answered: ";
      text += d.loaded() ? std::string(status_name(rc)) : d.error();
      text += "\n";
      const gmem_status copy = copy_report(text, buf, len);
      return copy == GMEM_OK ? rc : copy;
    }
    return copy_report(memory_report(devices, false), buf, len);
  } catch (...) { // std::bad_alloc while formatting
    return GMEM_ERROR_INTERNAL;
  }
}

} // extern "C"
