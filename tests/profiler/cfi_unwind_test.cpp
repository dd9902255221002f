// The cached-rule walk (profiler/recorder/cfi_unwind.h) against libgcc's unwinder: same return
// addresses from the same call sites, through frames of every shape a program has (rsp- and
// rbp-based CFA, alloca, libc callbacks, threads), no learning once the sites are known, and giving
// up (never a wrong frame) where it cannot replay a rule.
#include "profiler/format/module_map.h"
#include "profiler/recorder/cfi_unwind.h"
#include "profiler/recorder/stack_capture.h"

#include <gtest/gtest.h>

#include <alloca.h>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <thread>
#include <unwind.h>
#include <vector>

namespace gmem::trace {
namespace {

// The reference: libgcc's unwinder (always there; libunwind's thread-exit destructor trips
// ThreadSanitizer in the tests that walk from threads).
struct gcc_walk {
  void** out;
  int max;
  int n;
};
_Unwind_Reason_Code on_frame(_Unwind_Context* ctx, void* arg) {
  auto* w = static_cast<gcc_walk*>(arg);
  const std::uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0 || w->n >= w->max) return _URC_END_OF_STACK;
  w->out[w->n++] = reinterpret_cast<void*>(ip);
  return _URC_NO_REASON;
}
__attribute__((noinline)) int reference_backtrace(void** out, int max) {
  gcc_walk w{out, max, 0};
  _Unwind_Backtrace(on_frame, &w);
  return w.n;
}

struct walk {
  std::vector<std::uintptr_t> cached; // cfi_backtrace; empty when it gave up
  std::vector<std::uintptr_t> reference;
  bool gave_up = false;
};

// Both walks from one frame; the first address of each is its own call site here, so the
// comparison starts at the caller.
__attribute__((noinline)) walk both_walks() {
  walk w;
  std::uintptr_t a[64];
  void* b[65];
  const int n = cfi_backtrace(a, 64);
  const int m = reference_backtrace(b, 65) - 1; // its first frame is reference_backtrace's
  w.gave_up = n < 0;
  for (int i = 1; i < n; ++i)
    w.cached.push_back(a[i]);
  for (int i = 1; i < m; ++i)
    w.reference.push_back(reinterpret_cast<std::uintptr_t>(b[i + 1]));
  asm volatile("" ::: "memory");
  return w;
}

template <int N> __attribute__((noinline)) walk nested() {
  if constexpr (N == 0) {
    return both_walks();
  } else {
    walk w = nested<N - 1>();
    asm volatile("" ::: "memory");
    return w;
  }
}

// A frame whose CFA the compiler can only express from rbp (its stack size is dynamic).
__attribute__((noinline)) walk with_alloca(std::size_t bytes) {
  auto* p = static_cast<volatile char*>(alloca(bytes));
  p[0] = 1;
  walk w = nested<3>();
  p[bytes - 1] = 2;
  return w;
}

walk g_from_qsort;
int compare_and_walk(const void* a, const void* b) {
  if (g_from_qsort.reference.empty()) g_from_qsort = nested<2>();
  return std::memcmp(a, b, sizeof(int));
}

// The cached walk must give the reference walk's frames, up to where the reference ends
// (64 frames at most each).
void expect_same(const walk& w) {
  ASSERT_FALSE(w.gave_up);
  ASSERT_GE(w.reference.size(), 3u);
  EXPECT_EQ(w.cached, w.reference);
}

class cfi_unwind : public ::testing::Test {
protected:
  void SetUp() override {
    if (!cfi_unwind_init()) {
      GTEST_SKIP() << "no libdw: the cached walk is off";
    }
  }
};

TEST_F(cfi_unwind, matches_libunwind_through_frames_of_every_shape) {
  expect_same(nested<0>());
  expect_same(nested<7>());
  expect_same(nested<40>());
  expect_same(with_alloca(100));
  expect_same(with_alloca(5000));
  int v[] = {3, 1, 2};
  g_from_qsort = {};
  std::qsort(v, 3, sizeof(int), compare_and_walk); // frames inside libc
  expect_same(g_from_qsort);
  std::vector<walk> in_thread(1);
  std::thread([&] { in_thread[0] = nested<5>(); }).join();
  expect_same(in_thread[0]);
}

// Many call sites in turn, each walk meeting return addresses the others met too: the
// thread's copy of the rules (128 addresses, direct-mapped) must give each address its own rule,
// whatever else shares its entry.
TEST_F(cfi_unwind, walks_from_many_call_sites_in_turn_match_libunwind) {
  for (int round = 0; round < 3; ++round) {
    expect_same(nested<40>());
    expect_same(with_alloca(64));
    expect_same(nested<7>());
    expect_same(with_alloca(4096));
    expect_same(nested<23>());
    int v[] = {3, 1, 2};
    g_from_qsort = {};
    std::qsort(v, 3, sizeof(int), compare_and_walk);
    expect_same(g_from_qsort);
  }
}

TEST_F(cfi_unwind, learns_a_call_site_once) {
  cfi_unwind_counters before;
  for (int i = 0; i < 100; ++i) {
    expect_same(nested<6>()); // one call site: learned in the first round only
    if (i == 0) before = cfi_unwind_stats();
  }
  const cfi_unwind_counters after = cfi_unwind_stats();
  EXPECT_EQ(after.learned, before.learned);
  EXPECT_EQ(after.refused, before.refused);
}

walk g_in_handler;
void on_signal(int) {
  g_in_handler = nested<2>();
}

TEST_F(cfi_unwind, gives_up_or_matches_in_a_signal_handler) {
#if defined(__SANITIZE_THREAD__)
  // Learning a rule allocates (libdw), which ThreadSanitizer reports inside a handler; it also
  // runs handlers from its own interceptors, not from the kernel's signal frame.
  GTEST_SKIP() << "not meaningful under ThreadSanitizer";
#endif
  struct sigaction sa {};
  struct sigaction old {};
  sa.sa_handler = on_signal;
  sigaction(SIGUSR1, &sa, &old);
  g_in_handler = {};
  raise(SIGUSR1);
  sigaction(SIGUSR1, &old, nullptr);
  ASSERT_FALSE(g_in_handler.reference.empty());
  // The signal frame's rule is not replayable: the walk stops there, never past it wrongly.
  if (!g_in_handler.gave_up) {
    EXPECT_EQ(g_in_handler.cached, g_in_handler.reference);
  }
}

void load_and_unload_a_library() {
  for (const char* name : {"libcrypt.so.1", "libutil.so.1", "libanl.so.1"})
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) dlclose(h);
}

TEST_F(cfi_unwind, unloading_a_module_empties_the_cache) {
  expect_same(nested<4>());
  cfi_unwind_modules_changed();
  const cfi_unwind_counters before = cfi_unwind_stats();
  cfi_unwind_modules_changed(); // nothing unloaded since the last look: no reset
  EXPECT_EQ(cfi_unwind_stats().resets, before.resets);
  const unsigned long long subs = module_loads_now().subs;
  load_and_unload_a_library();
  if (module_loads_now().subs == subs) {
    GTEST_SKIP() << "no library here to load and unload";
  }
  cfi_unwind_modules_changed();
  EXPECT_EQ(cfi_unwind_stats().resets, before.resets + 1);
  expect_same(nested<4>()); // learned again
  EXPECT_GT(cfi_unwind_stats().learned, before.learned);
  // The same call site, twice: the second walk learns its rules again, also those this
  // thread kept a copy of.
  for (int i = 0; i < 2; ++i) {
    if (i == 1) {
      load_and_unload_a_library();
      cfi_unwind_modules_changed();
    }
    const cfi_unwind_counters was = cfi_unwind_stats();
    const walk w = nested<4>();
    expect_same(w);
    const cfi_unwind_counters now = cfi_unwind_stats();
    if (i == 1) { // every frame's rule looked up anew
      EXPECT_GE(now.learned + now.refused - was.learned - was.refused, w.cached.size());
    }
  }
}

TEST_F(cfi_unwind, threads_walk_while_the_cache_is_reset) {
  std::atomic<bool> stop{false};
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      while (!stop.load()) {
        walk w = nested<9>();
        if (!w.gave_up && w.cached != w.reference) mismatches.fetch_add(1);
      }
    });
  for (int i = 0; i < 50; ++i) {
    if (void* h = dlopen("libcrypt.so.1", RTLD_NOW | RTLD_LOCAL)) dlclose(h);
    cfi_unwind_modules_changed();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(mismatches.load(), 0);
}

} // namespace
} // namespace gmem::trace
