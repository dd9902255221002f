// The process's own entry points: the constructor that starts the shim, and the exit and fork
// handlers (shim_state.h, "Lifecycle"), with the GMEM_VERBOSE report printed at exit.
#include "interpose/shim_state.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <pthread.h>

#include "interpose/capture_tracker.h"
#include "interpose/context_pools.h"
#include "interpose/ipc/ipc_sharing.h"
#include "interpose/python_bootstrap.h"
#include "interpose/real_call.h"
#include "interpose/retired_pools.h"
#include "interpose/strict_mode.h"
#include "interpose/trace_hooks.h"
#include "interpose/upstream/stream_registry.h"
#include "profiler/format/trace_clock.h"
#include "profiler/recorder/cfi_unwind.h"
#include "profiler/recorder/stack_capture.h"

namespace gmem::shim {
namespace {

std::once_flag g_init_once;

std::size_t stats_source(trace::device_stats* out, std::size_t max) noexcept {
  return pools().fill_stats(out, max);
}

std::uint64_t g_start_ns = 0; // when the shim started: the run's wall time is counted from here

// gmem's own host time observing a framework's tensors (stacks included), per event and as a
// share of the run's wall time so far; nothing when nothing was observed.
void print_observe_cost() {
  const trace::observe_cost c = trace::observed_cost();
  if (c.allocs + c.frees == 0) return;
  const double own_ns = static_cast<double>(c.alloc_ns + c.free_ns);
  const double wall_ns = static_cast<double>(trace::monotonic_ns() - g_start_ns);
  auto per = [](std::uint64_t ns, std::uint64_t n) {
    return n != 0 ? static_cast<double>(ns) / static_cast<double>(n) : 0.0;
  };
  std::fprintf(stderr,
               "gmem: observe allocs=%llu alloc_ns=%.0f frees=%llu free_ns=%.0f own_ms=%.3f "
               "wall_ms=%.1f share_pct=%.4f\n",
               static_cast<unsigned long long>(c.allocs), per(c.alloc_ns, c.allocs),
               static_cast<unsigned long long>(c.frees), per(c.free_ns, c.frees), own_ns / 1e6,
               wall_ns / 1e6, wall_ns > 0 ? 100.0 * own_ns / wall_ns : 0.0);
}

// How the trace's file grew: the page helper's growths (made ahead of the hooks), the longest
// page population, and the hooks' stalls for bytes not made yet. Nothing without a trace.
void print_trace_growth() {
  const trace::trace_growth g = trace::growth();
  if (g.ahead + g.stalls == 0) return;
  auto ms = [](std::uint64_t ns) { return static_cast<double>(ns) / 1e6; };
  std::fprintf(stderr,
               "gmem: trace_growth ahead=%llu ahead_mib=%.1f ahead_ms=%.3f ahead_max_ms=%.3f "
               "populate_max_ms=%.3f stalls=%llu stall_ms=%.3f stall_max_ms=%.3f\n",
               static_cast<unsigned long long>(g.ahead),
               static_cast<double>(g.ahead_bytes) / (1 << 20), ms(g.ahead_ns), ms(g.ahead_max_ns),
               ms(g.populate_max_ns), static_cast<unsigned long long>(g.stalls), ms(g.stall_ns),
               ms(g.stall_max_ns));
}

void print_counters() {
  pools().for_each([](const context_entry& e) {
    auto print = [&](const char* kind, const pool& p) {
      const pool_stats s = p.stats();
      std::fprintf(stderr, "gmem: pool device=%d kind=%s", e.device(), kind);
#define GMEM_PRINT_STAT(n, d)                                                                      \
  std::fprintf(stderr, " %s=%llu", #n, static_cast<unsigned long long>(s.n));
      GMEM_POOL_STATS(GMEM_PRINT_STAT)
#undef GMEM_PRINT_STAT
      std::fprintf(stderr, "\n");
    };
    print("device", *e.device_pool);
    const spin_mutex::contention lc = e.device_pool->lock_contention();
    std::fprintf(stderr, "gmem: pool_lock device=%d locks=%llu waits=%llu wait_ns=%llu\n",
                 e.device(), static_cast<unsigned long long>(lc.locks),
                 static_cast<unsigned long long>(lc.waits),
                 static_cast<unsigned long long>(lc.wait_ns));
    const pool::slow_path_counters sp = e.device_pool->slow_path();
    std::fprintf(stderr,
                 "gmem: slow_path device=%d walks=%llu walk_ns=%llu fence_calls=%llu "
                 "fences_shared=%llu fence_wait_ns=%llu fence_ns=%llu marks=%llu marks_used=%llu "
                 "marks_refused=%llu\n",
                 e.device(), static_cast<unsigned long long>(sp.walks),
                 static_cast<unsigned long long>(sp.walk_ns),
                 static_cast<unsigned long long>(sp.fence_calls),
                 static_cast<unsigned long long>(sp.fences_shared),
                 static_cast<unsigned long long>(sp.fence_wait_ns),
                 static_cast<unsigned long long>(sp.fence_ns),
                 static_cast<unsigned long long>(sp.marks),
                 static_cast<unsigned long long>(sp.marks_used),
                 static_cast<unsigned long long>(sp.marks_refused));
    const driver_fences::counters ev = e.fences->stats();
    std::fprintf(stderr, "gmem: events device=%d records=%llu queries=%llu waits=%llu\n",
                 e.device(), ev.records, ev.queries, ev.waits);
    std::fprintf(stderr, "gmem: host_time device=%d fence_ns=%llu", e.device(),
                 static_cast<unsigned long long>(e.observer->fence_ns()));
    // cuMemAlloc segments: without VMM, or beside an arena (VMM segments report below).
    const device_upstream* segments = e.upstream != nullptr                    ? e.upstream
                                      : e.vmm != nullptr && !e.vmm->segments() ? &e.vmm->fallback()
                                                                               : nullptr;
    if (segments != nullptr) {
      std::fprintf(stderr, " segment_map_ns=%llu segment_unmap_ns=%llu",
                   static_cast<unsigned long long>(segments->map_ns()),
                   static_cast<unsigned long long>(segments->unmap_ns()));
    }
    std::fprintf(stderr, "\n");
    if (e.vmm != nullptr) {
      const vmm_upstream::counters v = e.vmm->stats();
      std::fprintf(stderr, "gmem: vmm device=%d", e.device());
#define GMEM_PRINT_VMM(n)                                                                          \
  std::fprintf(stderr, " %s=%llu", #n, static_cast<unsigned long long>(v.n));
      GMEM_VMM_COUNTERS(GMEM_PRINT_VMM)
#undef GMEM_PRINT_VMM
      std::fprintf(stderr, " spare_bytes=%zu\n", e.vmm->spare_bytes());
    }
    const std::size_t h = e.host_count.load(std::memory_order_acquire);
    for (std::size_t j = 0; j < h; ++j)
      print("host", *e.host[j].host_pool);
  });
  pools().for_each_entry([](const context_entry& e) { print_retired(e, stderr); });
  std::fprintf(stderr, "gmem: passthrough");
  for (std::size_t k = 0; k < trace::k_alloc_kind_count; ++k) {
    std::fprintf(stderr, " %s=%llu", trace::to_string(static_cast<trace::alloc_kind>(k)),
                 static_cast<unsigned long long>(g_passthrough_counts[k].load()));
  }
  std::fprintf(stderr, "\n");
  const substitution_counts c = substitutions();
  std::fprintf(stderr, "gmem: substitutions dlsym=%llu cuGetProcAddress=%llu\n",
               static_cast<unsigned long long>(c.by_dlsym),
               static_cast<unsigned long long>(c.by_proc_address));
  const trace::cfi_unwind_counters u = trace::cfi_unwind_stats();
  std::fprintf(stderr,
               "gmem: stacks cached_rules=%d learned=%llu refused=%llu resets=%llu "
               "fallbacks=%llu\n",
               trace::cached_rules_enabled() ? 1 : 0, static_cast<unsigned long long>(u.learned),
               static_cast<unsigned long long>(u.refused),
               static_cast<unsigned long long>(u.resets),
               static_cast<unsigned long long>(trace::capture_fallbacks()));
  const stream_registry::barrier_counters b = streams().stats();
  std::fprintf(stderr,
               "gmem: barriers made=%llu context=%llu streams_checked=%llu busy=%llu ns=%llu\n",
               b.made, b.context, b.streams, b.busy, b.ns);
  // tracked=0: a capture begin the shim cannot see was handed out, so every stream-ordered
  // hook asks the driver whether its stream captures (interpose/capture_tracker.h).
  print_observe_cost();
  print_trace_growth();
  std::fprintf(stderr, "gmem: captures open=%llu tracked=%d%s%s\n",
               static_cast<unsigned long long>(captures().open()), captures().tracked() ? 1 : 0,
               captures().tracked() ? "" : " untracked_by=", captures().untracked_by());
}

// Runs when exit() reaches the handler registered at start-up (late: handlers registered
// after ours, such as the CUDA runtime's teardown, ran before and still used the pool).
void on_exit() {
  if (forked_child()) return;
  mark_exiting();
  // Only processes that used the driver report (LD_PRELOAD reaches every child of a shell).
  if (shim_options().verbose >= 1 && driver_if_resolved() != nullptr) {
    print_counters();
  }
  trace::shutdown();
  ipc_at_exit();
}

void on_fork_child() {
  mark_forked_child();
  ipc_at_fork_child();
}

void init() {
  g_start_ns = trace::monotonic_ns();
  const options& o = set_options(new options(options::from_env()));
  g_strict.store(o.strict, std::memory_order_relaxed);
  trace::init();
  trace::set_stats_source(&stats_source);
  pthread_atfork(nullptr, nullptr, &on_fork_child);
  std::atexit(&on_exit);
  g_active.store(o.enable, std::memory_order_release);
  install_python_bootstrap();
}

__attribute__((constructor)) void construct() {
  ensure_init();
}

} // namespace

void ensure_init() {
  std::call_once(g_init_once, &init);
}

} // namespace gmem::shim
