// One T per thread, on the heap, made at the thread's first get() and freed at its exit: for
// the recorder's per-thread memos, which are too large for thread-local storage (a preloaded
// library's TLS is carved out of every thread's stack, and a program that makes threads with
// small stacks must not lose kilobytes of each or fail to create them). T is
// default-constructible and its constructor does not throw.
#pragma once

#include <mutex>
#include <new>
#include <pthread.h>

namespace gmem::trace {

template <typename T> class per_thread {
public:
  // The calling thread's T; nullptr when there is no memory for one or no way to free it at
  // the thread's exit (callers then go without).
  static T* get() noexcept {
    T* mine = t_mine_;
    return mine != nullptr ? mine : make();
  }

private:
  __attribute__((noinline)) static T* make() noexcept {
    try {
      std::call_once(once_, [] {
        key_made_ = pthread_key_create(&key_, [](void* p) {
                      t_mine_ = nullptr;
                      delete static_cast<T*>(p);
                    }) == 0;
      });
    } catch (...) {
      return nullptr;
    }
    if (!key_made_) return nullptr;
    T* mine = new (std::nothrow) T();
    if (mine == nullptr) return nullptr;
    if (pthread_setspecific(key_, mine) != 0) {
      delete mine;
      return nullptr;
    }
    t_mine_ = mine;
    return mine;
  }

  static inline thread_local T* t_mine_ = nullptr; // general-dynamic: fine when dlopen'ed too
  static inline pthread_key_t key_;
  static inline bool key_made_ = false; // set once, under once_
  static inline std::once_flag once_;
};

} // namespace gmem::trace
