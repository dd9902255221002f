// The gmem_* client API inside libgmem.so (include/gmem/gmem.h): answers from the shim's
// per-context pools (interpose/context_pools.h) and the real driver table, never from our
// own hooks. libgmem_client.so forwards here when the shim is preloaded and active.
//
// Lock order: no pool lock is held across a driver call (pool methods take and drop their
// own); contexts are made current around driver queries and restored before returning.
// A device's figures sum every live context on it (usually one: the primary context).
#include "client/abi.h"
#include "client/memory_report.h"
#include "gmem/gmem.h"
#include "interpose/context_pools.h"
#include "interpose/real_driver.h"
#include "interpose/shim_state.h"
#include "interpose/trace_hooks.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace gmem::shim {

// Limits set with gmem_set_limit for pools that do not exist yet; context_pools.cpp reads
// them when it creates a device pool. ~0 = not set (GMEM_LIMIT applies); slot k_max = "all".
namespace {
constexpr int k_limit_slots = 64;
std::atomic<std::uint64_t> g_limit_override[k_limit_slots + 1];
std::once_flag g_limit_once;
void init_limits() {
  std::call_once(g_limit_once, [] {
    for (auto& l : g_limit_override)
      l.store(~std::uint64_t{0}, std::memory_order_relaxed);
  });
}
} // namespace

bool client_limit_override(int device, std::uint64_t* bytes) {
  init_limits();
  std::uint64_t v = device >= 0 && device < k_limit_slots
                        ? g_limit_override[device].load(std::memory_order_acquire)
                        : ~std::uint64_t{0};
  if (v == ~std::uint64_t{0}) v = g_limit_override[k_limit_slots].load(std::memory_order_acquire);
  if (v == ~std::uint64_t{0}) return false;
  *bytes = v;
  return true;
}

namespace {

// Driver entry points the real table does not carry, found in the same libcuda handle.
struct extra_driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get_count)(int*) = nullptr;
  CUresult (*device_get_name)(char*, int, CUdevice) = nullptr;
};

const extra_driver& extras(const real_driver& real) {
  static const extra_driver x = [&real] {
    extra_driver e;
    dlsym_fn sym = real_dlsym();
    if (sym != nullptr && real.handle != nullptr) {
      e.init = reinterpret_cast<decltype(e.init)>(sym(real.handle, "cuInit"));
      e.device_get_count =
          reinterpret_cast<decltype(e.device_get_count)>(sym(real.handle, "cuDeviceGetCount"));
      e.device_get_name =
          reinterpret_cast<decltype(e.device_get_name)>(sym(real.handle, "cuDeviceGetName"));
    }
    if (e.init != nullptr) (void)e.init(0);
    return e;
  }();
  return x;
}

// Makes `ctx` current on this thread for the guard's lifetime (no-op when it already is).
class current_context {
public:
  current_context(const real_driver& real, CUcontext ctx) : real_(real) {
    CUcontext cur = nullptr;
    if (real.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx) return;
    pushed_ = real.cuCtxPushCurrent_v2 != nullptr && real.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS;
  }
  ~current_context() {
    CUcontext popped = nullptr;
    if (pushed_) (void)real_.cuCtxPopCurrent_v2(&popped);
  }
  current_context(const current_context&) = delete;
  current_context& operator=(const current_context&) = delete;

private:
  const real_driver& real_;
  bool pushed_ = false;
};

int resolve_device(const real_driver& real, int device) {
  if (device >= 0) return device;
  CUcontext ctx = nullptr;
  CUdevice d = 0;
  if (real.cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx != nullptr &&
      real.cuCtxGetDevice(&d) == CUDA_SUCCESS)
    return static_cast<int>(d);
  return 0;
}

// Device totals from the real driver (free does NOT count the pool's cache). Uses a live
// context of the device when there is one, else the primary context retained for the query.
gmem_status device_memory(const real_driver& real, int device, context_entry* entry,
                          gmem_stats_t& s, std::string* name) {
  const extra_driver& x = extras(real);
  int count = 0;
  if (x.device_get_count != nullptr && x.device_get_count(&count) == CUDA_SUCCESS &&
      device >= count)
    return GMEM_ERROR_INVALID_ARGUMENT;
  if (name != nullptr && x.device_get_name != nullptr) {
    char buf[256] = {};
    if (x.device_get_name(buf, sizeof buf - 1, device) == CUDA_SUCCESS) *name = buf;
  }
  std::size_t total = 0, free = 0;
  if (real.cuDeviceTotalMem_v2 != nullptr) (void)real.cuDeviceTotalMem_v2(&total, device);
  CUresult rc = CUDA_ERROR_NOT_INITIALIZED;
  if (entry != nullptr) {
    current_context guard(real, entry->link.ctx);
    rc = real.cuMemGetInfo_v2(&free, &total);
  } else if (real.cuDevicePrimaryCtxRetain != nullptr &&
             real.cuDevicePrimaryCtxRelease_v2 != nullptr) {
    CUcontext primary = nullptr;
    if (real.cuDevicePrimaryCtxRetain(&primary, device) == CUDA_SUCCESS) {
      {
        current_context guard(real, primary);
        rc = real.cuMemGetInfo_v2(&free, &total);
      }
      (void)real.cuDevicePrimaryCtxRelease_v2(device);
    }
  }
  if (rc != CUDA_SUCCESS) return GMEM_ERROR_DRIVER;
  s.device_total_bytes = total;
  s.device_free_bytes = free;
  return GMEM_OK;
}

std::uint64_t options_limit(const real_driver& real, int device, std::uint64_t total) {
  std::uint64_t v = 0;
  if (client_limit_override(device, &v)) return v;
  const options& o = shim_options();
  if (!o.limit_set) return 0;
  if (o.limit.is_percent && total == 0 && real.cuDeviceTotalMem_v2 != nullptr) {
    std::size_t t = 0;
    (void)real.cuDeviceTotalMem_v2(&t, device);
    total = t;
  }
  return o.limit.resolve(total);
}

// Everything gmem_stats answers for one device.
gmem_status device_stats(int device_in, gmem_stats_t& s, std::string* name) {
  const real_driver* real = driver();
  if (real == nullptr) return GMEM_ERROR_NO_DRIVER;
  const int device = resolve_device(*real, device_in);
  s = gmem_stats_t{};
  s.struct_size = sizeof(gmem_stats_t);
  s.version = GMEM_STATS_VERSION;
  s.device = device;
  s.flags = (g_active.load(std::memory_order_relaxed) ? GMEM_STATS_FROM_POOL : 0u) |
            GMEM_STATS_FROM_DRIVER;
  context_entry* first = nullptr;
  bool limited = false;
  pools().for_each([&](context_entry& e) {
    if (e.device() != device) return;
    if (first == nullptr || e.primary) first = &e;
    const pool_stats p = e.device_pool->stats();
#define GMEM_SUM(n) s.n += p.n;
    GMEM_STATS_FIELDS(GMEM_SUM)
#undef GMEM_SUM
    s.largest_free_block = std::max(s.largest_free_block, p.largest_free_block);
    s.limit_bytes = limited ? std::max(s.limit_bytes, p.limit_bytes) : p.limit_bytes;
    limited = true;
  });
  const gmem_status rc = device_memory(*real, device, first, s, name);
  if (rc != GMEM_OK) return rc;
  if (!limited) s.limit_bytes = options_limit(*real, device, s.device_total_bytes);
  // What could still be obtained: the driver's free memory plus what the pool holds unused;
  // under a limit, no more than limit - live (the pool trims its cache to grow).
  std::uint64_t avail = s.device_free_bytes + s.free_bytes + s.pending_bytes;
  if (s.limit_bytes != 0)
    avail = std::min(avail, s.limit_bytes - std::min(s.live_bytes, s.limit_bytes));
  s.allocatable_bytes = avail;
  return GMEM_OK;
}

// Fences pending blocks of every pool of `e` with one synchronization, then trims them.
void empty_entry(context_entry& e) {
  std::vector<pool*> ps{e.device_pool};
  const std::size_t h = e.host_count.load(std::memory_order_acquire);
  for (std::size_t i = 0; i < h; ++i)
    ps.push_back(e.host[i].host_pool);
  std::vector<std::uint64_t> tickets;
  for (pool* p : ps)
    tickets.push_back(p->begin_external_fence());
  if (e.fences->synchronize())
    for (std::size_t i = 0; i < ps.size(); ++i)
      ps[i]->end_external_fence(tickets[i]);
  for (pool* p : ps)
    (void)p->trim(0);
  // Virtual memory given back retires behind an event; the program asked for the memory now,
  // and the device was just synchronized, so the wait is short.
  if (e.vmm != nullptr) e.vmm->reap(true);
}

} // namespace
} // namespace gmem::shim

using namespace gmem::shim;
using gmem::client::copy_report;
using gmem::client::copy_stats;
using gmem::client::report_device;

extern "C" {

GMEM_API const char* gmem_status_name(gmem_status status) {
  return gmem::client::status_name(status);
}

GMEM_API int gmem_available(void) {
  return shim_active() ? 1 : 0;
}

GMEM_API gmem_status gmem_stats(int device, gmem_stats_t* out) {
  if (out == nullptr || device < -1) return GMEM_ERROR_INVALID_ARGUMENT;
  hook_scope scope;
  gmem_stats_t s{};
  const gmem_status rc = device_stats(device, s, nullptr);
  return rc == GMEM_OK ? copy_stats(s, out) : rc;
}

GMEM_API gmem_status gmem_reset_peak(void) {
  if (!g_active.load(std::memory_order_relaxed)) return GMEM_ERROR_NO_SHIM; // GMEM_ENABLE=0, fork
  pools().for_each([](context_entry& e) { e.device_pool->reset_peaks(); });
  return GMEM_OK;
}

GMEM_API gmem_status gmem_empty_cache(void) {
  hook_scope scope;
  pools().for_each([](context_entry& e) { empty_entry(e); });
  return GMEM_OK;
}

GMEM_API gmem_status gmem_set_limit(uint64_t bytes, int device) {
  if (device < -1 || device >= k_limit_slots) return GMEM_ERROR_INVALID_ARGUMENT;
  init_limits();
  if (device == -1) {
    for (auto& l : g_limit_override)
      l.store(~std::uint64_t{0}, std::memory_order_relaxed);
    g_limit_override[k_limit_slots].store(bytes, std::memory_order_release);
  } else {
    g_limit_override[device].store(bytes, std::memory_order_release);
  }
  pools().for_each([&](context_entry& e) {
    if (device == -1 || e.device() == device) e.device_pool->set_limit(bytes);
  });
  const std::string value =
      std::to_string(bytes) + (device == -1 ? "" : " on device " + std::to_string(device));
  gmem::trace::option_changed("GMEM_LIMIT", value.c_str());
  return GMEM_OK;
}

GMEM_API gmem_status gmem_allocatable_bytes(int device, uint64_t* out) {
  if (out == nullptr || device < -1) return GMEM_ERROR_INVALID_ARGUMENT;
  hook_scope scope;
  gmem_stats_t s{};
  const gmem_status rc = device_stats(device, s, nullptr);
  if (rc == GMEM_OK) *out = s.allocatable_bytes;
  return rc;
}

GMEM_API int gmem_can_allocate(uint64_t bytes, int device) {
  uint64_t avail = 0;
  return gmem_allocatable_bytes(device, &avail) == GMEM_OK && avail >= bytes ? 1 : 0;
}

GMEM_API gmem_status gmem_mark(const char* label) {
  if (label == nullptr) return GMEM_ERROR_INVALID_ARGUMENT;
  if (!g_active.load(std::memory_order_relaxed)) return GMEM_ERROR_NO_SHIM;
  gmem::trace::marker(label);
  return GMEM_OK;
}

GMEM_API gmem_status gmem_memory_report(char* buf, size_t len) {
  if (buf == nullptr || len == 0) return GMEM_ERROR_INVALID_ARGUMENT;
  hook_scope scope;
  try {
    std::vector<int> devices;
    pools().for_each([&](context_entry& e) {
      if (std::find(devices.begin(), devices.end(), e.device()) == devices.end())
        devices.push_back(e.device());
    });
    if (devices.empty()) devices.push_back(-1);
    std::sort(devices.begin(), devices.end());
    std::vector<report_device> rows;
    gmem_status first_error = GMEM_OK;
    for (int d : devices) {
      report_device row;
      const gmem_status rc = device_stats(d, row.stats, &row.name);
      if (rc == GMEM_OK)
        rows.push_back(std::move(row));
      else if (first_error == GMEM_OK)
        first_error = rc;
    }
    const gmem_status copied = copy_report(gmem::client::memory_report(rows, true), buf, len);
    return copied != GMEM_OK ? copied : first_error;
  } catch (...) { // std::bad_alloc while formatting
    return GMEM_ERROR_INTERNAL;
  }
}

} // extern "C"
