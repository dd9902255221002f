#include "interpose/framework_observer.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "interpose/context_pools.h"
#include "interpose/shim_state.h"
#include "interpose/trace_hooks.h"
#include "profiler/format/trace_clock.h"
#include "profiler/recorder/tensor_observer.h"

namespace gmem::shim {
namespace {

using trace::alloc_kind;
using trace::observed_event;

// PyTorch's TraceEntry, opaque: only its address is used, through the layout.
struct trace_entry;
using tracker = std::function<void(const trace_entry&)>;
// CUDAAllocator::attachAllocatorTraceTracker(AllocatorTraceTracker) called through its vtable
// slot: `this` first, the std::function by value (the Itanium ABI passes it by address of a
// temporary the caller owns and destroys).
using attach_fn = void (*)(void* self, tracker);

// One attachment per process: the layout and the gate outlive every tracker copy PyTorch keeps
// (never freed: trackers may run until the process ends).
struct torch_observation {
  trace::torch_layout layout;
  trace::sanity_gate gate;
  bool check_owner = false;
  std::string label;
};
std::atomic<torch_observation*> g_torch{nullptr};
std::atomic<bool> g_torch_claimed{false};

bool pool_owns(std::uintptr_t address) noexcept {
  return pools().device_owner(address, nullptr) != nullptr;
}

// The gate closed on this thread: one warning, and the trace no longer claims the tensors are
// observed (readers report the cache as they do without observation).
void stop(const torch_observation& o, const std::string& why) noexcept {
  std::fprintf(stderr,
               "gmem: warning: %s: the allocator's trace reported %s; per-tensor observation "
               "stopped (the layout does not match this PyTorch)\n",
               o.label.c_str(), why.c_str());
  (void)trace::mark_observed(trace::observed_framework::pytorch, false);
}

void on_torch_event(const trace_entry& entry) noexcept {
  const std::uint64_t since = trace::now_ticks(); // gmem's own time starts here
  torch_observation* o = g_torch.load(std::memory_order_acquire);
  if (GMEM_UNLIKELY(o == nullptr || forked_child())) return;
  const observed_event e = trace::decode(o->layout, &entry);
  if (e.type == observed_event::what::other) {
    // Segment, snapshot and OOM events are checked too (the shim sees the segments itself).
    if (GMEM_UNLIKELY(o->gate.checked() < trace::sanity_gate::k_checked_events)) {
      std::string why;
      if (!o->gate.admit(e, o->layout.action_max, nullptr, &why) && !why.empty()) stop(*o, why);
    }
    return;
  }
  std::string why;
  if (!o->gate.admit(e, o->layout.action_max, o->check_owner ? &pool_owns : nullptr, &why)) {
    if (!why.empty()) stop(*o, why);
    return;
  }
  if (e.type == observed_event::what::alloc) {
    const std::uint32_t stack = trace::capture_stack();
    trace::alloc(e.address, e.size, e.size, e.device, e.stream, alloc_kind::tensor, stack);
    trace::observed(true, since);
  } else {
    trace::free(e.address, e.device, e.stream, alloc_kind::tensor);
    trace::observed(false, since);
  }
}

const void* module_base(const void* address) {
  Dl_info info{};
  return dladdr(address, &info) != 0 ? info.dli_fbase : nullptr;
}

} // namespace
} // namespace gmem::shim

using namespace gmem::shim;

extern "C" int gmem_observe_torch_attach(const void* allocator_var, const void* layout,
                                         const char* label, int quiet) {
  ensure_init();
  const std::string name = label != nullptr ? std::string(label).substr(0, 64) : "PyTorch";
  auto refuse = [&](int status, const std::string& why) {
    std::fprintf(stderr,
                 "gmem: %s: per-tensor observation not available (%s); its cached segments "
                 "are recognised as its cache\n",
                 name.c_str(), why.c_str());
    return status;
  };
  if (forked_child() || exiting()) return GMEM_OBSERVE_OFF;
  if (layout == nullptr) return refuse(GMEM_OBSERVE_BAD_LAYOUT, "no layout");
  std::uint32_t caller_bytes = 0; // its first field: read nothing beyond what the caller has
  std::memcpy(&caller_bytes, layout, sizeof caller_bytes);
  if (caller_bytes != sizeof(gmem::trace::torch_layout))
    return refuse(GMEM_OBSERVE_BAD_LAYOUT, "a layout descriptor of another size");
  gmem::trace::torch_layout l{};
  std::memcpy(&l, layout, sizeof l);
  if (const std::string bad = gmem::trace::validate(l); !bad.empty())
    return refuse(GMEM_OBSERVE_BAD_LAYOUT, bad);
  if (allocator_var == nullptr) return refuse(GMEM_OBSERVE_NO_ALLOCATOR, "no allocator variable");
  void* allocator = __atomic_load_n(static_cast<void* const*>(allocator_var), __ATOMIC_ACQUIRE);
  if (allocator == nullptr) return refuse(GMEM_OBSERVE_NO_ALLOCATOR, "no allocator yet");
  void* const* vtable = *static_cast<void* const* const*>(allocator);
  const void* fn = vtable != nullptr ? vtable[l.attach_slot] : nullptr;
  // The slot's function must be code of the library that holds the variable (PyTorch's own
  // allocator), not another allocator's (CUDAPluggableAllocator) or a misread slot.
  const void* lib = module_base(allocator_var);
  if (fn == nullptr || lib == nullptr || module_base(fn) != lib)
    return refuse(GMEM_OBSERVE_FOREIGN, "the allocator is not PyTorch's caching allocator");
  if (g_torch_claimed.exchange(true)) return GMEM_OBSERVE_ALREADY;
  if (!gmem::trace::mark_observed(gmem::trace::observed_framework::pytorch)) {
    g_torch_claimed.store(false);
    return GMEM_OBSERVE_OFF; // recording is off: nothing to observe into
  }
  auto* o = new torch_observation{
      l, {}, (l.flags & gmem::trace::k_check_owner) != 0 && shim_active(), name};
  g_torch.store(o, std::memory_order_release);
  try {
    reinterpret_cast<attach_fn>(const_cast<void*>(fn))(
        allocator, tracker([](const trace_entry& e) { on_torch_event(e); }));
  } catch (...) {
    (void)gmem::trace::mark_observed(gmem::trace::observed_framework::pytorch, false);
    return refuse(GMEM_OBSERVE_NO_ALLOCATOR, "the allocator refused the tracker");
  }
  if (quiet == 0)
    std::fprintf(stderr,
                 "gmem: %s: caching allocator kept (CUDA graphs work); each tensor traced with "
                 "its line\n",
                 name.c_str());
  return GMEM_OBSERVE_ATTACHED;
}

extern "C" int gmem_observe_enable(int framework) {
  ensure_init();
  if (framework < 0 || framework >= gmem::trace::k_observed_framework_count || forked_child())
    return 0;
  return gmem::trace::mark_observed(static_cast<gmem::trace::observed_framework>(framework)) ? 1
                                                                                             : 0;
}

extern "C" void gmem_observe_alloc(std::uintptr_t address, std::size_t requested,
                                   std::size_t rounded, int device, std::uintptr_t stream) {
  if (address == 0 || forked_child()) return;
  const std::uint64_t since = gmem::trace::now_ticks();
  const std::uint32_t stack = gmem::trace::capture_stack();
  gmem::trace::alloc(address, requested, rounded < requested ? requested : rounded, device, stream,
                     gmem::trace::alloc_kind::tensor, stack);
  gmem::trace::observed(true, since);
}

extern "C" void gmem_observe_free(std::uintptr_t address, int device) {
  if (address == 0 || forked_child()) return;
  const std::uint64_t since = gmem::trace::now_ticks();
  gmem::trace::free(address, device, 0, gmem::trace::alloc_kind::tensor);
  gmem::trace::observed(false, since);
}

extern "C" unsigned gmem_python_wait_begin(int kind, int skip) {
  if (kind != static_cast<int>(gmem::trace::wait_kind::backward) || skip < 0 || skip > 4 ||
      forked_child())
    return 0;
  return gmem::trace::wait_begin(gmem::trace::wait_kind::backward, static_cast<unsigned>(skip));
}

extern "C" void gmem_python_wait_end(unsigned token) {
  gmem::trace::wait_end(token);
}
