// A second LD_PRELOAD interposer, written the usual way: it wraps getpid() and finds the next
// definition with dlsym(RTLD_NEXT). libgmem.so's dlsym wrapper must leave that lookup relative
// to this library; if it resolved it relative to itself, the lookup would find this very
// wrapper again and recurse until the stack overflows.
#include <atomic>
#include <dlfcn.h>
#include <unistd.h>

namespace {
std::atomic<long> g_calls{0};
}

extern "C" __attribute__((visibility("default"))) long other_interposer_calls() {
  return g_calls.load();
}

extern "C" __attribute__((visibility("default"))) pid_t getpid() {
  using getpid_fn = pid_t (*)();
  static getpid_fn next = reinterpret_cast<getpid_fn>(dlsym(RTLD_NEXT, "getpid"));
  g_calls.fetch_add(1);
  return next();
}
