#include "tests/fake_cuda/fake_state.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/units.h"

namespace fake {
namespace {

void report_at_exit() {
  const char* report = std::getenv("FAKE_CUDA_REPORT");
  if (report == nullptr || report[0] != '1') return;
  fake_cuda_counters c;
  fakeGetCounters(&c);
#define FAKE_CUDA_PRINT(n)                                                                         \
  std::fprintf(stderr, "fake_cuda: %s=%llu\n", #n, static_cast<unsigned long long>(c.n));
  FAKE_CUDA_COUNTERS(FAKE_CUDA_PRINT)
#undef FAKE_CUDA_PRINT
}

// fork(): the child gets the state with get().mu free (held across the fork by the forking
// thread, so that no stream thread is inside it) and none of the stream threads.
void lock_for_fork() {
  get().mu.lock();
}
void unlock_after_fork() { // in the parent and in the child alike
  get().mu.unlock();
}

state* make_state() {
  auto* s = new state; // leaked on purpose: see fake_state.h
  if (const char* total = std::getenv("FAKE_CUDA_TOTAL_BYTES")) {
    if (auto v = gmem::parse_size(total)) s->total_bytes = *v;
  }
  if (const char* n = std::getenv("FAKE_CUDA_DEVICES")) s->device_count = std::atoi(n);
  if (const char* v = std::getenv("FAKE_CUDA_DRIVER_VERSION")) s->driver_version = std::atoi(v);
  if (const char* b = std::getenv("FAKE_CUDA_CONTEXT_BARRIER"))
    s->context_barrier_noop = std::strcmp(b, "noop") == 0;
  if (const char* q = std::getenv("FAKE_CUDA_CAPTURE_QUERY_US")) s->capture_query_us = std::atoi(q);
  if (s->device_count < 1) s->device_count = 1;
  const auto devices = static_cast<std::size_t>(s->device_count);
  s->used_bytes.assign(devices, 0);
  s->primary.assign(devices, nullptr);
  s->primary_refs.assign(devices, 0);
  s->count.smallest_alloc = ~std::uint64_t{0};
  std::atexit(report_at_exit);
  pthread_atfork(lock_for_fork, unlock_after_fork, unlock_after_fork);
  return s;
}

} // namespace

state& get() {
  static state* s = make_state();
  return *s;
}

context*& current() {
  thread_local context* c = nullptr;
  return c;
}

std::vector<context*>& ctx_stack() {
  thread_local std::vector<context*>* v = new std::vector<context*>;
  return *v;
}

bool live_context(context* c) {
  for (context* l : get().contexts) {
    if (l == c) return true;
  }
  return false;
}

stream* resolve_stream(CUstream s) {
  const auto v = reinterpret_cast<std::uintptr_t>(s);
  if (v == 0 || v == 1 || v == 2) {
    context* c = current();
    return c != nullptr ? c->legacy : nullptr;
  }
  auto* st = reinterpret_cast<stream*>(s);
  return st->destroyed ? nullptr : st;
}

namespace {

// Caller holds c->order_mu.
void apply_context_waits_locked(context* c, stream* s) {
  for (const context_wait& w : c->waits) {
    if (w.seq > s->context_waits_applied)
      s->enqueue([ev = w.ev, waited = w.waited] { ev->wait(waited); });
  }
  s->context_waits_applied = c->wait_seq;
}

} // namespace

void submit(stream* s, std::function<void()> work) {
  context* c = s->ctx();
  if (c == nullptr) {
    s->enqueue(std::move(work));
    return;
  }
  // Each target is taken before the work that waits for it is queued, under one lock per
  // context, so two such waits can never wait for each other.
  std::lock_guard order(c->order_mu);
  apply_context_waits_locked(c, s);
  if (s->non_blocking()) {
    s->enqueue(std::move(work));
    return;
  }
  std::vector<std::pair<stream*, std::uint64_t>> waits;
  if (s == c->legacy) {
    std::vector<stream*> streams;
    {
      std::lock_guard lock(get().mu);
      streams = c->streams;
    }
    for (stream* b : streams) {
      if (b != c->legacy && !b->non_blocking()) waits.emplace_back(b, b->submitted());
    }
  } else {
    waits.emplace_back(c->legacy, c->legacy->submitted());
  }
  for (auto [other, target] : waits) {
    s->enqueue([other = other, target = target] { other->wait_until(target); });
  }
  s->enqueue(std::move(work));
}

bool invalidate_captures(context* c) {
  std::lock_guard lock(get().mu);
  bool any = false;
  for (stream* s : c->streams) {
    if (!s->destroyed && s->capturing) {
      s->invalidated = true;
      any = true;
    }
  }
  return any;
}

void synchronize_context(context* c) {
  std::vector<stream*> streams;
  {
    std::lock_guard lock(get().mu);
    if (!live_context(c)) return;
    streams = c->streams;
  }
  // A forked child has none of its parent's stream threads: their work never runs there, and
  // one of them may have held its stream's lock at the fork.
  const pid_t self = getpid();
  for (stream* s : streams)
    if (s->owner() == self) s->synchronize();
}

const std::map<std::uintptr_t, allocation>::iterator find_allocation(std::uintptr_t address) {
  auto& allocs = get().allocs;
  auto it = allocs.upper_bound(address);
  if (it == allocs.begin()) return allocs.end();
  --it;
  if (address >= it->first + it->second.bytes) return allocs.end();
  return it;
}

void destroy_context_allocations(context* c) {
  auto& st = get();
  for (auto it = st.allocs.begin(); it != st.allocs.end();) {
    if (it->second.ctx == c) {
      if (it->second.kind == mem_kind::vmm) { // not the context's: stays mapped
        ++it;
        continue;
      }
      if (it->second.kind == mem_kind::device) {
        st.used_bytes[static_cast<std::size_t>(c->device)] -= it->second.bytes;
      }
      free_storage(it->first, it->second);
      st.count.live_allocs--;
      it = st.allocs.erase(it);
    } else {
      ++it;
    }
  }
}

void* alloc_storage(std::size_t rounded, bool shareable, int* fd) {
  *fd = -1;
  if (!shareable) {
    void* p = std::aligned_alloc(512, rounded);
    if (p != nullptr) std::memset(p, 0, rounded);
    return p;
  }
  const int m = static_cast<int>(::syscall(SYS_memfd_create, "fake-cuda-alloc", 1u /*CLOEXEC*/));
  if (m < 0) return nullptr;
  if (::ftruncate(m, static_cast<off_t>(rounded)) != 0) {
    ::close(m);
    return nullptr;
  }
  void* p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
  if (p == MAP_FAILED) {
    ::close(m);
    return nullptr;
  }
  *fd = m;
  return p;
}

void free_storage(std::uintptr_t base, const allocation& a) {
  if (a.fd == -1) {
    std::free(reinterpret_cast<void*>(base));
    return;
  }
  ::munmap(reinterpret_cast<void*>(base), (a.bytes + 511) / 512 * 512);
  if (a.fd >= 0) ::close(a.fd);
}

} // namespace fake
