#include "profiler/recorder.h"

#include <algorithm>
#include <atomic>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

#include "common/options.h"
#include "common/units.h"
#include "profiler/stack_capture.h"
#include "profiler/trace_reader.h"

namespace gmem::trace {

namespace bip = boost::interprocess;

namespace {

enum state : int { k_uninitialized = 0, k_enabled = 1, k_open = 2, k_off = 3 };

// Process globals, deliberately leaked: hooks may run during and after exit handlers.
std::atomic<int> g_state{k_uninitialized};
std::atomic<trace_writer*> g_writer{nullptr};
std::atomic<stats_source> g_source{nullptr};
std::mutex g_mu; // creation, shutdown and the sampler's wake-ups; never held by a hook's fast path
recorder_options* g_options = nullptr;
std::string* g_name = nullptr;
std::condition_variable* g_wake = nullptr;
bool g_stop = false;      // under g_mu
bool g_stopped = true;    // under g_mu: the sampler thread is not running
bool g_shut_down = false; // under g_mu

void on_fork_child() {
  // The child shares the parent's mapping: writing into it would mix two processes.
  g_state.store(k_off);
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

// Creates, sizes and maps the object; halves the big tables while /dev/shm has no room.
trace_writer* create_locked() {
  const process_identity who = process_identity::current();
  const std::string name = object_name(who.pid, who.proc_start_ticks);
  writer_config config = g_options->config.normalized();
  const std::uint64_t wanted = config.total_bytes();
  try {
    bip::shared_memory_object::remove(name.c_str()); // a leftover of this very process only
    bip::permissions perms;
    perms.set_permissions(0600);
    bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write, perms);
    const int fd = shm.get_mapping_handle().handle;
    ::fchmod(fd, 0600); // whatever the umask
    int err = 0;
    for (;;) {
      shm.truncate(static_cast<bip::offset_t>(config.total_bytes()));
      // Reserve the pages now: touching a page of a full tmpfs later would kill the program
      // with SIGBUS.
      err = posix_fallocate(fd, 0, static_cast<off_t>(config.total_bytes()));
      if (err == 0) break;
      const writer_config smaller = config.halved();
      if (smaller.total_bytes() >= config.total_bytes()) break;
      config = smaller;
    }
    if (err != 0) {
      bip::shared_memory_object::remove(name.c_str());
      std::fprintf(stderr,
                   "gmem: warning: cannot reserve %s in /dev/shm for the trace %s (%s); running "
                   "without a trace\n",
                   format_bytes(config.total_bytes()).c_str(), name.c_str(), std::strerror(err));
      return nullptr;
    }
    if (config.total_bytes() < wanted)
      std::fprintf(stderr,
                   "gmem: warning: /dev/shm has no room for a %s trace; recording into %s "
                   "(%llu live allocations, %llu events)\n",
                   format_bytes(wanted).c_str(), format_bytes(config.total_bytes()).c_str(),
                   static_cast<unsigned long long>(config.live_slots / 2),
                   static_cast<unsigned long long>(config.events));
    auto* region = new bip::mapped_region(shm, bip::read_write); // leaked: outlives exit
    auto* w = new trace_writer(region->get_address(), config, who);
    *g_name = name;
    return w;
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "gmem: warning: cannot create the trace /dev/shm/%s (%s); running without a "
                 "trace\n",
                 name.c_str(), e.what());
    return nullptr;
  }
}

} // namespace

recorder_options recorder_options::from_env() {
  static const char* const k_mine[] = {"GMEM_TRACE",       "GMEM_TRACE_LIVE", "GMEM_TRACE_EVENTS",
                                       "GMEM_STACK_DEPTH", "GMEM_TRACE_SAVE", "GMEM_SAMPLE_MS"};
  const options o = options::parse(
      [](const char* env) -> const char* {
        for (const char* m : k_mine)
          if (std::strcmp(env, m) == 0) return std::getenv(env);
        return nullptr; // the shim parsed (and warned about) its own rows already
      },
      &options::warn_once); // the shim may have printed the same line already
  recorder_options r;
  r.enabled = o.trace_enable;
  r.config.live_slots = std::max<std::uint64_t>(o.trace_live, 1) * 2; // load factor <= 1/2
  r.config.events = o.trace_events;
  r.config.stack_depth = static_cast<std::uint32_t>(std::min<std::uint64_t>(o.stack_depth, 256));
  r.config.sample_interval_ns = std::clamp<std::uint64_t>(o.sample_ms, 1, 3'600'000) * 1'000'000;
  r.save_path = o.trace_save;
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
    g_state.store(k_off);
    return;
  }
  pthread_atfork(nullptr, nullptr, &on_fork_child);
  g_state.store(options.enabled ? k_enabled : k_off);
}

trace_writer* recorder_writer_if_open() noexcept {
  return g_writer.load(std::memory_order_acquire);
}

trace_writer* recorder_writer() noexcept {
  if (trace_writer* w = g_writer.load(std::memory_order_acquire)) return w;
  if (g_state.load(std::memory_order_relaxed) != k_enabled) return nullptr;
  std::lock_guard lock(g_mu);
  if (g_state.load() != k_enabled) return g_writer.load();
  trace_writer* w = nullptr;
  try {
    if (g_options->config.stack_depth > 0) init_unwinder();
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
  g_state.store(w ? k_open : k_off);
  return w;
}

void recorder_set_stats_source(stats_source source) noexcept {
  g_source.store(source, std::memory_order_release);
}

void recorder_shutdown() noexcept {
  trace_writer* w = g_writer.load(std::memory_order_acquire);
  if (!w) return;
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
  if (!save_path.empty()) {
    std::string error;
    if (!save_bytes(
            std::span<const std::byte>(static_cast<const std::byte*>(w->data()), w->total_bytes()),
            save_path, false, &error))
      std::fprintf(stderr, "gmem: warning: GMEM_TRACE_SAVE: %s; the trace stays in /dev/shm\n",
                   error.c_str());
  }
}

std::string recorder_object_name() {
  std::lock_guard lock(g_mu);
  return g_name ? *g_name : std::string();
}

} // namespace gmem::trace
