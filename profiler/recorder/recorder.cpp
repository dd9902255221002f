#include "profiler/recorder/recorder.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <random>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "common/options.h"
#include "common/units.h"
#include "profiler/format/trace_clock.h"
#include "profiler/reader/object_names.h"
#include "profiler/reader/retention.h"
#include "profiler/reader/trace_save.h"
#include "profiler/recorder/python_frames.h"
#include "profiler/recorder/stack_capture.h"

namespace gmem::trace {

std::atomic<bool> g_recording_off{false};
std::atomic<trace_writer*> g_writer{nullptr};

namespace {

enum state : int { k_uninitialized = 0, k_enabled = 1, k_open = 2, k_off = 3 };

// Process globals, deliberately leaked: hooks may run during and after exit handlers.
std::atomic<int> g_state{k_uninitialized};
std::atomic<stats_source> g_source{nullptr};
std::mutex g_mu; // creation, shutdown and the sampler's wake-ups; never held by a hook's fast path
recorder_options* g_options = nullptr;
std::string* g_name = nullptr;
class shm_backing;
std::atomic<shm_backing*> g_backing{nullptr}; // the object's, once created (leaked with it)
std::condition_variable* g_wake = nullptr;
bool g_stop = false;      // under g_mu
bool g_stopped = true;    // under g_mu: the sampler thread is not running
bool g_shut_down = false; // under g_mu
// When this process's last retention pass ended (monotonic ns; 0 = none yet).
std::atomic<std::uint64_t> g_last_retention_ns{0};

void retention_pass(const std::string& spare) {
  (void)apply_retention(g_options->retention, spare);
  g_last_retention_ns.store(monotonic_ns());
}

// k_off is final: recording_off() (interpose/trace_hooks.h) lets the hooks skip every call
// into the recorder with one load once it is reached.
void store_state(int s) {
  if (s == k_off) g_recording_off.store(true, std::memory_order_relaxed);
  g_state.store(s);
}

void on_fork_child() {
  // The child shares the parent's mapping: writing into it would mix two processes.
  store_state(k_off);
  g_writer.store(nullptr);
}

void take_sample(trace_writer& w, sample_reason reason) {
  device_stats buf[64];
  if (stats_source source = g_source.load(std::memory_order_acquire)) {
    const std::size_t n = std::min<std::size_t>(source(buf, std::size(buf)), std::size(buf));
    w.sample(buf, n, reason);
  }
  w.heartbeat();
}

void sampler_main(trace_writer* w, std::uint64_t interval_ns) {
  try {
    retention_pass(recorder_object_name()); // see create_locked()
  } catch (...) {
  }
  std::unique_lock lock(g_mu);
  // First tick early: it refines the clock calibration of short-lived programs.
  auto wait = std::chrono::nanoseconds(std::min<std::uint64_t>(interval_ns, 10'000'000));
  while (!g_stop) {
    g_wake->wait_for(lock, wait);
    if (g_stop) break;
    lock.unlock();
    take_sample(*w, sample_reason::periodic);
    lock.lock();
    wait = std::chrono::nanoseconds(interval_ns);
  }
  g_stopped = true;
  g_wake->notify_all();
}

// Every "%p" becomes the pid.
std::string expand_path(std::string path) {
  const std::string pid = std::to_string(getpid());
  for (auto p = path.find("%p"); p != std::string::npos; p = path.find("%p", p + pid.size()))
    path.replace(p, 2, pid);
  return path;
}

// The object's file grows with the trace: each growth reserves its pages (posix_fallocate,
// so a full /dev/shm refuses growth instead of raising SIGBUS when a page is touched) and
// maps them in (so the hooks never take the page fault), within GMEM_TRACE_MAX. Growth costs
// system calls and a first touch of every page (milliseconds for a large event chunk): an
// extent announced ahead of its need (prepare()) is grown by a helper thread of the backing,
// started at the first announcement, so the hook that then allocates it finds its bytes ready.
// The file grows by what the writer announced only: its size stays what the trace uses, give or
// take the extents announced and not reached yet, which shutdown gives back (trim()).
class shm_backing final : public trace_backing {
public:
  shm_backing(int fd, std::string name, size_or_percent max) noexcept
      : fd_(fd), name_(std::move(name)), max_(max) {}
  void set_mapping(std::byte* base) noexcept { base_ = base; }
  // The writer is made: from now on a growth the hooks wait for counts as a stall.
  void set_created() noexcept { created_.store(true, std::memory_order_relaxed); }

  bool grow(std::uint64_t new_total) noexcept override {
    // A hook that needs bytes not made yet waits here (for the helper, or for its own growth):
    // a stall. Creating the object and its writer's sections is not one.
    const bool pending = created_.load(std::memory_order_relaxed) &&
                         new_total > backed_.load(std::memory_order_acquire);
    const std::uint64_t t0 = pending ? monotonic_ns() : 0;
    std::lock_guard lock(grow_mu_);
    const bool ok = grow_locked(new_total, true);
    if (pending) {
      const std::uint64_t ns = monotonic_ns() - t0;
      ++growth_.stalls;
      growth_.stall_ns += ns;
      growth_.stall_max_ns = std::max(growth_.stall_max_ns, ns);
    }
    return ok;
  }

  void prepare(std::uint64_t total) noexcept override {
    {
      std::lock_guard lock(ahead_mu_);
      if (total <= ahead_want_ || base_ == nullptr) return;
      ahead_want_ = total;
      if (!helper_started_) {
        try {
          std::thread([this] { ahead_main(); }).detach();
          helper_started_ = true;
        } catch (...) { // no thread: grow() does the work when it is needed
          return;
        }
      }
    }
    ahead_cv_.notify_one();
  }

  // After it the helper grows nothing more (an announcement in flight would undo the trim):
  // a late hook's grow() makes what it needs itself.
  void trim(std::uint64_t total) noexcept override {
    std::lock_guard lock(grow_mu_); // after a helper's growth in flight
    trimmed_ = true;
    if (backed_.load(std::memory_order_relaxed) > total &&
        ::ftruncate(fd_, static_cast<off_t>(total)) == 0)
      backed_.store(total, std::memory_order_release);
  }

  bool backed(std::uint64_t total) const noexcept override {
    return total <= backed_.load(std::memory_order_acquire);
  }

  trace_growth growth() const noexcept {
    std::lock_guard lock(grow_mu_);
    return growth_;
  }

private:
  // The helper: grows the file to what was announced, quietly (a refusal here is no loss;
  // the grow() that needs the bytes tries again and says so).
  void ahead_main() noexcept {
    std::unique_lock lock(ahead_mu_);
    for (;;) {
      ahead_cv_.wait(lock, [this] { return ahead_want_ > ahead_done_; });
      const std::uint64_t want = ahead_want_;
      lock.unlock();
      {
        std::lock_guard grow_lock(grow_mu_);
        const std::uint64_t before = backed_.load(std::memory_order_relaxed);
        const std::uint64_t t0 = monotonic_ns();
        if (!trimmed_ && grow_locked(want, false) && want > before) {
          const std::uint64_t ns = monotonic_ns() - t0;
          ++growth_.ahead;
          growth_.ahead_bytes += want - before;
          growth_.ahead_ns += ns;
          growth_.ahead_max_ns = std::max(growth_.ahead_max_ns, ns);
        }
      }
      lock.lock();
      ahead_done_ = want;
    }
  }

  bool grow_locked(std::uint64_t new_total, bool warn) noexcept {
    const std::uint64_t backed = backed_.load(std::memory_order_relaxed);
    if (new_total <= backed) return true;
    const shm_space space = shm_space_now();
    // A share of the free space counts the trace's own bytes as free: the limit does not
    // shrink because the trace itself grew.
    const std::uint64_t limit = max_.is_percent
                                    ? max_.resolve(space.free_bytes + backed)
                                    : (max_.bytes == 0 ? ~std::uint64_t{0} : max_.bytes);
    if (new_total > limit)
      return warn && refuse(new_total, "GMEM_TRACE_MAX allows " + format_bytes(limit));
    if (::ftruncate(fd_, static_cast<off_t>(new_total)) != 0)
      return warn && refuse(new_total, std::strerror(errno));
    if (const int err = posix_fallocate(fd_, static_cast<off_t>(backed),
                                        static_cast<off_t>(new_total - backed));
        err != 0) {
      (void)::ftruncate(fd_, static_cast<off_t>(backed));
      return warn && refuse(new_total, std::strerror(err));
    }
    if (base_ != nullptr) {
      const std::uint64_t t0 = monotonic_ns();
      populate(backed, new_total);
      growth_.populate_max_ns = std::max(growth_.populate_max_ns, monotonic_ns() - t0);
    }
    backed_.store(new_total, std::memory_order_release);
    return true;
  }
  // Maps the new pages in by touching each (the file's pages are reserved already, so no touch
  // can raise SIGBUS). Not MADV_POPULATE_WRITE: it holds the process's mmap lock while the
  // kernel faults the whole range in, and every other thread's mmap and munmap (malloc's large
  // blocks, Python's arenas) waits that long. A fault taken by a touch holds only its VMA's lock
  // on kernels that take shared faults under it (Linux 6.7 and later); older kernels take the
  // mmap lock for each fault, and the waits may stay. The touches cost the helper more kernel
  // time: bench/probes/page_prep_wait.cpp measures both.
  void populate(std::uint64_t from, std::uint64_t to) noexcept {
    for (std::uint64_t at = from & ~std::uint64_t{4095}; at < to; at += 4096) // the new pages
      if (at >= from) layout::store_word(reinterpret_cast<std::uint64_t*>(base_ + at), 0);
  }
  bool refuse(std::uint64_t wanted, const std::string& why) noexcept {
    if (base_ == nullptr) return false; // creating the object: create_locked() says why
    if (!warned_) {
      warned_ = true;
      std::fprintf(stderr,
                   "gmem: warning: the trace %s stops growing at %s (it needed %s: %s); what it "
                   "cannot hold is counted as lost, not recorded (gmem stats shows the losses)\n",
                   name_.c_str(), format_bytes(backed_.load()).c_str(),
                   format_bytes(wanted).c_str(), why.c_str());
    }
    return false;
  }

  int fd_;
  std::string name_;
  size_or_percent max_;
  std::byte* base_ = nullptr;
  std::atomic<bool> created_{false};
  mutable std::mutex grow_mu_; // the file's growth: grow() (under the space's mutex), the helper
  std::atomic<std::uint64_t> backed_{0}; // written under grow_mu_; backed() reads it without
  trace_growth growth_;                  // under grow_mu_
  bool warned_ = false;                  // under grow_mu_
  bool trimmed_ = false;                 // under grow_mu_: trim() ran (shutdown)
  std::mutex ahead_mu_;                  // never held across a growth
  std::condition_variable ahead_cv_;
  std::uint64_t ahead_want_ = 0, ahead_done_ = 0; // under ahead_mu_
  bool helper_started_ = false;                   // under ahead_mu_
};

// Creates the object at its header's size and maps room for all it may grow to; the writer
// grows it from there. The descriptor stays open (growth needs it), like the mapping.
trace_writer* create_locked() {
  const process_identity who = process_identity::current();
  // A random part no other user can guess: nobody can take the name first (which would
  // leave the process untraced) or plant an object where it will be looked for.
  std::uint64_t nonce = 0;
  if (::getrandom(&nonce, sizeof nonce, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof nonce))
    nonce = std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^
            monotonic_ns();
  const std::string name = object_name(who.pid, who.proc_start_ticks, nonce);
  const writer_config config = g_options->config.normalized();
  // The retention pass walks /dev/shm (within k_retention_scan: anybody can fill it with
  // names) and reads the user's traces: the sampler thread does it, off the hook that
  // allocates, unless /dev/shm is short of room for this trace right now.
  if (const shm_space space = shm_space_now();
      space.free_bytes < g_options->retention.keep_free.resolve(space.total_bytes))
    retention_pass({});
  auto fail = [&](const std::string& why) -> trace_writer* {
    std::fprintf(stderr,
                 "gmem: warning: cannot create the trace /dev/shm/%s (%s); running without a "
                 "trace\n",
                 name.c_str(), why.c_str());
    return nullptr;
  };
  const std::string path = "/" + name;
  // O_EXCL: never an object someone else made; shm_open adds O_NOFOLLOW and O_CLOEXEC.
  const int fd = ::shm_open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return fail(std::strerror(errno));
  ::fchmod(fd, 0600); // whatever the umask
  try {
    auto* backing = new shm_backing(fd, name, g_options->max_bytes); // leaked: outlives exit
    const std::uint64_t map_bytes = config.map_bytes();
    void* base =
        ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (base == MAP_FAILED || !backing->grow(layout::k_header_bytes)) {
      const std::string why = base == MAP_FAILED ? std::strerror(errno) : "no room in /dev/shm";
      ::shm_unlink(path.c_str());
      ::close(fd);
      return fail(why);
    }
    backing->set_mapping(static_cast<std::byte*>(base));
    auto* w = new trace_writer(base, map_bytes, config, who, backing);
    if (!w->ok()) {
      ::shm_unlink(path.c_str());
      return fail("no room in /dev/shm for its first " + format_bytes(w->total_bytes()));
    }
    *g_name = name;
    backing->set_created();
    g_backing.store(backing, std::memory_order_release);
    return w;
  } catch (const std::exception& e) {
    ::shm_unlink(path.c_str());
    return fail(e.what());
  }
}

} // namespace

recorder_options recorder_options::from_env() {
  static const char* const k_mine[] = {
      "GMEM_TRACE",        "GMEM_TRACE_LIVE",     "GMEM_TRACE_EVENTS",    "GMEM_STACK_DEPTH",
      "GMEM_PYTHON_DEPTH", "GMEM_TRACE_SAVE",     "GMEM_SAMPLE_MS",       "GMEM_TRACE_MAX",
      "GMEM_TRACE_KEEP",   "GMEM_TRACE_KEEP_MAX", "GMEM_TRACE_KEEP_FREE", "GMEM_TRACE_KEEP_AGE"};
  const options o = options::parse(
      [](const char* env) -> const char* {
        for (const char* m : k_mine)
          if (std::strcmp(env, m) == 0) return options::env_value(env); // AT_SECURE: none
        return nullptr; // the shim parsed (and warned about) its own rows already
      },
      &options::warn_once); // the shim may have printed the same line already
  recorder_options r;
  r.enabled = o.trace_enable;
  r.config.live_slots = std::max<std::uint64_t>(o.trace_live, 1) * 2; // load factor <= 1/2
  r.config.events = o.trace_events;
  r.config.stack_depth = static_cast<std::uint32_t>(std::min<std::uint64_t>(o.stack_depth, 256));
  r.config.python_depth = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(o.python_depth, layout::k_max_python_depth));
  r.config.sample_interval_ns = std::clamp<std::uint64_t>(o.sample_ms, 1, 3'600'000) * 1'000'000;
  r.save_path = o.trace_save;
  r.max_bytes = o.trace_max;
  r.retention = retention_policy::from_options(o);
  if (o.trace_keep == "all") {
    r.keep = keep_mode::all;
  } else if (o.trace_keep == "outstanding") {
    r.keep = keep_mode::outstanding;
  } else if (o.trace_keep == "none") {
    r.keep = keep_mode::none;
  } else {
    std::fprintf(stderr,
                 "gmem: warning: GMEM_TRACE_KEEP='%s' is not all, outstanding or none; using "
                 "all\n",
                 o.trace_keep.c_str());
  }
  return r;
}

void recorder_init(const recorder_options& options) noexcept {
  std::lock_guard lock(g_mu);
  if (g_state.load() != k_uninitialized) return;
  try {
    g_options = new recorder_options(options);
    g_name = new std::string();
    g_wake = new std::condition_variable();
  } catch (...) {
    store_state(k_off);
    return;
  }
  pthread_atfork(nullptr, nullptr, &on_fork_child);
  store_state(options.enabled ? k_enabled : k_off);
}

trace_writer* recorder_writer_create() noexcept {
  if (trace_writer* w = g_writer.load(std::memory_order_acquire)) return w;
  if (g_state.load(std::memory_order_relaxed) != k_enabled) return nullptr;
  std::lock_guard lock(g_mu);
  if (g_state.load() != k_enabled) return g_writer.load();
  trace_writer* w = nullptr;
  try {
    if (g_options->config.stack_depth > 0) init_unwinder();
    if (g_options->config.python_depth > 0) python_init();
    w = create_locked();
    if (w) {
      w->update_modules(scan_modules());
      g_stop = false;
      g_stopped = false;
      std::thread(sampler_main, w, g_options->config.sample_interval_ns).detach();
    }
  } catch (...) { // no thread or no memory: keep what we have
  }
  g_writer.store(w, std::memory_order_release);
  store_state(w ? k_open : k_off);
  return w;
}

void recorder_set_stats_source(stats_source source) noexcept {
  g_source.store(source, std::memory_order_release);
}

void recorder_sample_now() noexcept {
  trace_writer* w = recorder_writer_if_open();
  if (w == nullptr) return;
  {
    std::lock_guard lock(g_mu);
    if (g_shut_down) return;
  }
  take_sample(*w, sample_reason::periodic);
}

void recorder_shutdown() noexcept {
  trace_writer* w = g_writer.load(std::memory_order_acquire);
  if (!w) {
    // No trace yet, or another thread is creating it right now (under g_mu): wait for that
    // creation and shut its trace down below, so that exit never leaves a half-made object
    // behind; with none, no later hook may create one.
    std::lock_guard lock(g_mu);
    w = g_writer.load();
    if (!w) {
      if (g_state.load() == k_enabled) store_state(k_off);
      return;
    }
  }
  std::string save_path;
  {
    std::unique_lock lock(g_mu);
    if (g_shut_down) return;
    g_shut_down = true;
    g_stop = true;
    g_wake->notify_all();
    // Bounded: a sampler stuck in the stats source must not hang exit.
    g_wake->wait_for(lock, std::chrono::milliseconds(500), [] { return g_stopped; });
    try {
      save_path = expand_path(g_options->save_path);
    } catch (...) {
    }
  }
  take_sample(*w, sample_reason::final);
  w->mark_shutdown();
  bool saved = true;
  if (!save_path.empty()) {
    std::string error;
    saved = save_bytes(
        std::span<const std::byte>(static_cast<const std::byte*>(w->data()), w->total_bytes()),
        save_path, false, &error);
    if (!saved)
      std::fprintf(stderr, "gmem: warning: GMEM_TRACE_SAVE: %s; the trace stays in /dev/shm\n",
                   error.c_str());
  }
  const keep_mode keep = g_options->keep;
  if (saved &&
      (keep == keep_mode::none || (keep == keep_mode::outstanding && w->live_count() == 0)))
    ::shm_unlink(("/" + recorder_object_name()).c_str()); // the mapping stays for late hooks
  // Never its own trace. A process whose pass ran within the last minute (a short job: the
  // sampler's pass at its start) skips it: its exit pays nothing for a /dev/shm that others
  // may have filled.
  const std::uint64_t last = g_last_retention_ns.load();
  if (last == 0 || monotonic_ns() - last > 60'000'000'000ull)
    retention_pass(recorder_object_name());
}

std::string recorder_object_name() {
  std::lock_guard lock(g_mu);
  return g_name ? *g_name : std::string();
}

trace_growth recorder_growth() noexcept {
  const shm_backing* b = g_backing.load(std::memory_order_acquire);
  return b != nullptr ? b->growth() : trace_growth{};
}

} // namespace gmem::trace
