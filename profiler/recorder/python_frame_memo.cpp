#include "profiler/recorder/python_frame_memo.h"

#include <mutex>
#include <new>
#include <pthread.h>

namespace gmem::trace {

namespace {

// On the heap, not in thread-local storage (40 KiB): a preloaded library's TLS is carved out of
// every thread's stack (cfi_unwind.h keeps its rules so too). Freed at the thread's exit.
thread_local python_frame_memo* t_memo = nullptr; // general-dynamic: fine when dlopen'ed too
pthread_key_t g_key;
bool g_key_made = false; // set once, under g_key_once
std::once_flag g_key_once;

__attribute__((noinline)) python_frame_memo* new_memo() noexcept {
  try {
    std::call_once(g_key_once, [] {
      g_key_made = pthread_key_create(&g_key, [](void* p) {
                     t_memo = nullptr;
                     delete static_cast<python_frame_memo*>(p);
                   }) == 0;
    });
  } catch (...) {
    return nullptr;
  }
  if (!g_key_made) return nullptr; // the memo could not be freed at exit: go without
  auto* memo = new (std::nothrow) python_frame_memo();
  if (memo == nullptr) return nullptr;
  if (pthread_setspecific(g_key, memo) != 0) {
    delete memo;
    return nullptr;
  }
  t_memo = memo;
  return memo;
}

} // namespace

python_frame_memo* python_frame_memo::mine() noexcept {
  python_frame_memo* memo = t_memo;
  return memo != nullptr ? memo : new_memo();
}

void python_frame_memo::clear() noexcept {
  for (entry& e : entries_)
    e = {};
}

} // namespace gmem::trace
