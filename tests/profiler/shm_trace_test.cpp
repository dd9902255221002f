// Trace objects in /dev/shm, written by real (forked) processes: exit, SIGKILL mid-run, pid
// reuse, permissions, GMEM_TRACE=0. Not run under sanitizers (fork + kill).
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <map>
#include <mutex>
#include <set>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "profiler/reader/object_names.h"
#include "profiler/reader/pid_lookup.h"
#include "profiler/reader/trace_listing.h"
#include "profiler/reader/trace_open.h"
#include "profiler/reader/trace_reader.h"
#include "profiler/reader/trace_save.h"
#include "profiler/recorder/recorder.h"
#include "tests/profiler/test_buffer.h"

namespace gmem::trace {
namespace {

namespace bip = boost::interprocess;

std::uint32_t last_child = 0; // pid of the last in_child() process

// Runs `body` in a child whose stderr is captured; returns {exit status, stderr}.
template <class F> std::pair<int, std::string> in_child(F body) {
  int err[2];
  if (pipe(err) != 0) return {-1, ""};
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(err[1], 2);
    close(err[0]);
    body();
    _exit(0);
  }
  close(err[1]);
  std::string text;
  char buf[512];
  for (ssize_t n; (n = read(err[0], buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  close(err[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  last_child = static_cast<std::uint32_t>(pid);
  return {status, text};
}

recorder_options small_recorder() {
  recorder_options o;
  o.config = testing::small_config();
  o.config.live_slots = 4096;
  o.config.events = 1024;
  o.config.sample_interval_ns = 5'000'000;
  return o;
}

__attribute__((noinline)) void allocate_some(int first, int count) {
  for (int i = first; i < first + count; ++i) {
    trace_writer* w = recorder_writer();
    if (!w) _exit(3);
    const std::uint32_t stack = w->capture_stack(0);
    w->alloc(static_cast<std::uintptr_t>(i + 1) << 12, static_cast<std::size_t>(i) * 100 + 1,
             512 * static_cast<std::size_t>(i + 1), 0, 0, alloc_kind::device, stack);
    asm volatile("" ::: "memory");
  }
}

// A child process that records `count` allocations, frees every other one, writes one byte
// to `ready`, then either exits normally or spins until killed.
pid_t spawn_writer(int count, bool spin_forever, int* ready_fd,
                   recorder_options options = small_recorder()) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    recorder_init(options);
    allocate_some(0, count);
    trace_writer* w = recorder_writer();
    if (w)
      for (int i = 0; i < count; i += 2)
        w->free(static_cast<std::uintptr_t>(i + 1) << 12, 0, 0, alloc_kind::device);
    if (write(fds[1], "x", 1) != 1) _exit(4);
    if (spin_forever) {
      for (int i = count;; ++i) { // keep writing events until SIGKILL
        if (w) w->marker("tick");
        if (i % 1000 == 0) usleep(100);
      }
    }
    recorder_shutdown();
    _exit(0);
  }
  close(fds[1]);
  *ready_fd = fds[0];
  return pid;
}

void wait_ready(int fd) {
  char c;
  ASSERT_EQ(read(fd, &c, 1), 1);
  close(fd);
}

void expect_odd_allocations_live(const trace& t, int count) {
  ASSERT_EQ(t.live.size(), static_cast<std::size_t>(count / 2));
  for (const auto& a : t.live) {
    const auto i = static_cast<std::size_t>((a.address >> 12) - 1);
    EXPECT_EQ(i % 2, 1u);
    EXPECT_EQ(a.requested, i * 100 + 1);
    EXPECT_EQ(a.rounded, 512 * (i + 1));
    ASSERT_NE(a.stack_id, 0u);
    ASSERT_NE(t.stack(a.stack_id), nullptr);
    EXPECT_GE(t.stack(a.stack_id)->size(), 2u);
  }
}

TEST(shm_trace, exited_process_leaves_a_readable_trace) {
  int ready = -1;
  const pid_t pid = spawn_writer(100, false, &ready);
  ASSERT_GT(pid, 0);
  wait_ready(ready);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const read_result r = open_pid(static_cast<std::uint32_t>(pid));
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.info.state, trace_state::exited);
  EXPECT_EQ(r.value.info.pid, static_cast<std::uint32_t>(pid));
  EXPECT_NE(r.value.info.exit_realtime_ns, 0u);
  expect_odd_allocations_live(r.value, 100);
  EXPECT_FALSE(r.value.modules.empty());
  const std::string name = r.value.info.object;
  struct stat st {};
  ASSERT_EQ(stat(("/dev/shm/" + name).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::string error;
  EXPECT_TRUE(remove_shm(name, &error)) << error;
  EXPECT_FALSE(open_pid(static_cast<std::uint32_t>(pid)));
}

TEST(shm_trace, sigkill_mid_run_leaves_live_allocations) {
  int ready = -1;
  const pid_t pid = spawn_writer(200, true, &ready);
  ASSERT_GT(pid, 0);
  wait_ready(ready);
  // While it runs: live, with the allocations so far.
  const read_result running = open_pid(static_cast<std::uint32_t>(pid));
  ASSERT_TRUE(running) << running.error.to_string();
  EXPECT_EQ(running.value.info.state, trace_state::running);
  expect_odd_allocations_live(running.value, 200);
  // A snapshot saved while it runs reads back as running.
  const std::string name = running.value.info.object;
  const std::string path = ::testing::TempDir() + "/shm_snapshot_" + std::to_string(pid);
  std::string error;
  ASSERT_TRUE(save_shm(name, path, &error)) << error;
  const read_result saved = open_file(path);
  ASSERT_TRUE(saved) << saved.error.to_string();
  EXPECT_EQ(saved.value.info.state, trace_state::running);
  EXPECT_TRUE(saved.value.info.saved_file);
  std::remove(path.c_str());
  usleep(20000); // let it write (and wrap) for a while
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(status));
  const read_result r = open_pid(static_cast<std::uint32_t>(pid));
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.info.state, trace_state::crashed);
  expect_odd_allocations_live(r.value, 200);
  EXPECT_EQ(r.value.events.size() + r.value.losses.lost_events, r.value.losses.last_seq);
  EXPECT_GE(r.value.losses.last_seq, 300u); // 200 allocs + 100 frees, then markers
  EXPECT_TRUE(remove_shm(name, &error)) << error;
}

// Threads of a real process that pass addresses to each other (one frees what another
// allocated, the next allocates it again), each in its own event lane, then SIGKILL: the
// reader's timeline has every address allocated, freed, allocated again, in that order.
TEST(shm_trace, threads_handing_addresses_on_read_back_in_order) {
  constexpr int k_threads = 4, k_rounds = 50, k_addresses = 8;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    recorder_options o = small_recorder();
    o.config.events = 1 << 14; // room for every event: lanes of 1024 each
    recorder_init(o);
    trace_writer* w = recorder_writer();
    if (!w) _exit(3);
    // Address a: allocated by thread t in round r when (r + a) % k_threads == t, freed by the
    // next thread in the round after: a baton, each hand-off ordered by a mutex.
    std::mutex mu;
    std::condition_variable cv;
    int turn = 0; // round * k_threads + thread
    std::vector<std::thread> threads;
    for (int t = 0; t < k_threads; ++t)
      threads.emplace_back([&, t] {
        for (int r = 0; r < k_rounds; ++r) {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return turn == r * k_threads + t; });
          for (int a = 0; a < k_addresses; ++a) {
            const auto address = static_cast<std::uintptr_t>(a + 1) << 20;
            if (r > 0 || t > 0) w->free(address, 0, 0, alloc_kind::device);
            w->alloc(address, static_cast<std::size_t>(t + 1), 512, 0, 0, alloc_kind::device, 0);
          }
          ++turn;
          cv.notify_all();
        }
      });
    for (auto& th : threads)
      th.join();
    if (write(fds[1], "x", 1) != 1) _exit(4);
    for (;;)
      pause(); // killed
  }
  close(fds[1]);
  wait_ready(fds[0]);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  const read_result r = open_pid(static_cast<std::uint32_t>(pid));
  ASSERT_TRUE(r) << r.error.to_string();
  const trace& t = r.value;
  constexpr std::size_t k_events =
      std::size_t{k_threads} * k_rounds * k_addresses * 2 - k_addresses;
  ASSERT_EQ(t.events.size(), k_events); // nothing lapped
  EXPECT_EQ(t.losses.lost_events, 0u);
  EXPECT_EQ(t.losses.history_from_ns, 0u);
  EXPECT_EQ(t.losses.unmatched_frees, 0u);
  std::map<std::uintptr_t, int> state; // address -> the thread (1-based) holding it, 0 = free
  std::set<std::uint32_t> writers;
  int turns = 0;
  for (const event& e : t.events) {
    writers.insert(e.thread);
    int& holder = state[e.address];
    if (e.type == event_type::free) {
      EXPECT_NE(holder, 0) << "free before its allocation at seq " << e.seq;
      holder = 0;
    } else {
      ASSERT_EQ(e.type, event_type::alloc);
      EXPECT_EQ(holder, 0) << "allocated twice at seq " << e.seq;
      // The baton's order: round r's thread t allocates after round r's thread t-1.
      EXPECT_EQ(static_cast<int>(e.size), turns / k_addresses % k_threads + 1) << e.seq;
      holder = static_cast<int>(e.size);
      ++turns;
    }
  }
  EXPECT_EQ(writers.size(), static_cast<std::size_t>(k_threads));
  ASSERT_EQ(t.live.size(), static_cast<std::size_t>(k_addresses));
  for (const auto& a : t.live)
    EXPECT_EQ(a.requested, static_cast<std::size_t>(k_threads)); // the last round's last thread
  std::string error;
  EXPECT_TRUE(remove_shm(t.info.object, &error)) << error;
}

TEST(shm_trace, pid_reuse_keeps_two_objects_apart) {
  // Two processes that had the same pid differ in their start time: two objects. The pid is
  // one no process can have (above any pid_max): a pid that runs means that process, whose
  // own trace it is or none.
  const std::uint32_t pid = 4000000002u;
  std::string names[2];
  for (int k = 0; k < 2; ++k) {
    process_identity who = testing::test_identity();
    who.pid = pid;
    who.proc_start_ticks = 1000 + static_cast<std::uint64_t>(k);
    who.argv = {"program" + std::to_string(k)};
    const writer_config c = testing::small_config();
    names[k] = object_name(pid, who.proc_start_ticks);
    bip::shared_memory_object::remove(names[k].c_str());
    bip::shared_memory_object shm(bip::create_only, names[k].c_str(), bip::read_write);
    shm.truncate(static_cast<bip::offset_t>(c.map_bytes()));
    bip::mapped_region region(shm, bip::read_write);
    trace_writer w(region.get_address(), c.map_bytes(), c, who);
    w.alloc(0x1000 * (static_cast<std::uintptr_t>(k) + 1), 10, 512, 0, 0, alloc_kind::device, 0);
  }
  EXPECT_NE(names[0], names[1]);
  for (int k = 0; k < 2; ++k) {
    const read_result r = open_shm(names[k]);
    ASSERT_TRUE(r) << r.error.to_string();
    EXPECT_EQ(r.value.info.command_line, "program" + std::to_string(k));
    EXPECT_EQ(r.value.info.state, trace_state::crashed); // our start time is not 1000/1001
    ASSERT_EQ(r.value.live.size(), 1u);
    EXPECT_EQ(r.value.live[0].address, 0x1000u * (k + 1));
  }
  int listed = 0;
  for (const auto& e : list_traces())
    if (e.pid == pid) {
      ++listed;
      EXPECT_TRUE(e.readable) << e.problem;
    }
  EXPECT_EQ(listed, 2);
  const read_result newest = open_pid(pid);
  ASSERT_TRUE(newest);
  EXPECT_EQ(newest.value.info.command_line, "program1");
  for (const auto& n : names)
    EXPECT_TRUE(remove_shm(n, nullptr));
}

TEST(shm_trace, other_users_cannot_open_it) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to switch to another uid (uid 65534)";
  int ready = -1;
  const pid_t pid = spawn_writer(4, false, &ready);
  wait_ready(ready);
  int status = 0;
  waitpid(pid, &status, 0);
  const read_result mine = open_pid(static_cast<std::uint32_t>(pid));
  ASSERT_TRUE(mine) << mine.error.to_string();
  const std::string name = mine.value.info.object;
  const pid_t other = fork();
  if (other == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    const read_result r = open_shm(name);
    if (r) _exit(1); // could read it: wrong
    _exit(r.error.message.find("Permission denied") != std::string::npos ? 0 : 3);
  }
  ASSERT_EQ(waitpid(other, &status, 0), other);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: readable by uid 65534; 2: setuid failed; 3: other error";
  EXPECT_TRUE(remove_shm(name, nullptr));
}

TEST(shm_trace, a_forked_child_does_not_write_its_parents_trace) {
  int ready = -1;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    recorder_init(small_recorder());
    allocate_some(0, 3);
    const pid_t child = fork();
    if (child == 0) _exit(recorder_writer() == nullptr ? 0 : 1); // stands aside
    int status = 0;
    waitpid(child, &status, 0);
    recorder_shutdown();
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 2);
  }
  close(fds[1]);
  ready = fds[0];
  close(ready);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const read_result r = open_pid(static_cast<std::uint32_t>(pid));
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.live.size(), 3u);
  remove_shm(r.value.info.object, nullptr);
}

TEST(shm_trace, cannot_create_the_object_warns_once_and_keeps_running) {
  const auto [status, text] = in_child([] {
    recorder_options o = small_recorder();
    o.max_bytes = *parse_size_or_percent("4K"); // not even room for the header
    recorder_init(o);
    bool none = true;
    for (int i = 0; i < 3; ++i)
      none = none && recorder_writer() == nullptr;
    _exit(none ? 0 : 1);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const std::string warning = "gmem: warning: cannot create the trace";
  const auto first = text.find(warning);
  ASSERT_NE(first, std::string::npos) << text;
  EXPECT_EQ(text.find(warning, first + 1), std::string::npos) << "warned twice: " << text;
  EXPECT_EQ(text.find("stops growing"), std::string::npos) << "two warnings: " << text;
  EXPECT_NE(text.find("running without a trace"), std::string::npos) << text;
}

// Case 10 of docs/security.md: a name taken before the process creates its object (here a directory
// and a file under the predictable part of the name) no longer switches its trace off.
TEST(shm_trace, a_name_taken_first_does_not_switch_the_trace_off) {
  const auto [status, err] = in_child([] {
    const process_identity who = process_identity::current();
    const std::string predictable = object_name(who.pid, who.proc_start_ticks);
    if (mkdir(("/dev/shm/" + predictable).c_str(), 0700) != 0) _exit(2);
    const int fd = open(("/dev/shm/" + predictable + ".0000000000000000").c_str(),
                        O_CREAT | O_EXCL | O_WRONLY, 0600);
    if (fd < 0) _exit(2);
    close(fd);
    recorder_init(small_recorder());
    trace_writer* w = recorder_writer();
    const std::string name = recorder_object_name();
    const bool ok = w != nullptr && name.rfind(predictable + ".", 0) == 0 &&
                    name != predictable + ".0000000000000000";
    rmdir(("/dev/shm/" + predictable).c_str());
    unlink(("/dev/shm/" + predictable + ".0000000000000000").c_str());
    if (ok) remove_shm(name, nullptr);
    _exit(ok ? 0 : 1);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status << " " << err;
  std::uint32_t pid = 0;
  std::uint64_t ticks = 0;
  EXPECT_TRUE(parse_object_name("gmem.12.34.00ff00ff00ff00ff", &pid, &ticks));
  EXPECT_EQ(pid, 12u);
  EXPECT_EQ(ticks, 34u);
  EXPECT_FALSE(parse_object_name("gmem.12.34.00FF00FF00FF00FF", &pid, &ticks));
  EXPECT_FALSE(parse_object_name("gmem.12.34.00ff", &pid, &ticks));
  EXPECT_FALSE(parse_object_name("gmem.12.34.", &pid, &ticks));
}

TEST(shm_trace, gmem_trace_0_records_nothing) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("GMEM_TRACE", "0", 1);
    recorder_init(recorder_options::from_env());
    _exit(recorder_writer() == nullptr ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(open_pid(static_cast<std::uint32_t>(pid)));
}

// The /dev/shm objects of `pid`, readable or not (a half-made one has no header yet).
std::vector<std::string> objects_of(std::uint32_t pid) {
  std::vector<std::string> found;
  const std::string prefix = "gmem." + std::to_string(pid) + ".";
  if (DIR* d = opendir("/dev/shm")) {
    while (const dirent* e = readdir(d))
      if (std::string(e->d_name).rfind(prefix, 0) == 0) found.emplace_back(e->d_name);
    closedir(d);
  }
  return found;
}

TEST(shm_trace, after_shutdown_a_process_without_a_trace_creates_none) {
  const auto [status, err] = in_child([] {
    recorder_init(small_recorder());
    recorder_shutdown();
    _exit(recorder_writer() == nullptr ? 0 : 1);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
  const std::vector<std::string> left = objects_of(last_child);
  for (const std::string& name : left)
    remove_shm(name, nullptr);
  EXPECT_TRUE(left.empty());
}

// Exit while a thread creates the trace (its first allocation): the shutdown waits for it,
// and with GMEM_TRACE_KEEP=none removes it; never a half-made object left behind.
TEST(shm_trace, exit_during_creation_leaves_no_object) {
  std::vector<std::string> left;
  for (int delay_us = 0; delay_us <= 600; delay_us += 40) {
    const auto [status, err] = in_child([delay_us] {
      recorder_options o = small_recorder();
      o.keep = keep_mode::none;
      recorder_init(o);
      std::thread([] { (void)recorder_writer(); }).detach();
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      recorder_shutdown();
      _exit(0);
    });
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
    for (const std::string& name : objects_of(last_child)) {
      left.push_back(name);
      remove_shm(name, nullptr);
    }
  }
  EXPECT_TRUE(left.empty()) << left.size() << " objects left, first "
                            << (left.empty() ? "" : left.front());
}

TEST(shm_trace, options_from_the_environment) {
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("GMEM_TRACE_LIVE", "1000", 1);
    setenv("GMEM_STACK_DEPTH", "4", 1);
    setenv("GMEM_SAMPLE_MS", "250", 1);
    setenv("GMEM_TRACE_SAVE", "/tmp/x-%p.gmem", 1);
    const recorder_options o = recorder_options::from_env();
    const bool ok = o.enabled && o.config.live_slots == 2000 && o.config.stack_depth == 4 &&
                    o.config.sample_interval_ns == 250'000'000 && o.save_path == "/tmp/x-%p.gmem";
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST(shm_trace, save_at_exit_writes_the_file) {
  const std::string path = ::testing::TempDir() + "/exit_save_%p.gmem";
  recorder_options o = small_recorder();
  o.save_path = path;
  int ready = -1;
  const pid_t pid = spawn_writer(10, false, &ready, o);
  wait_ready(ready);
  int status = 0;
  waitpid(pid, &status, 0);
  const std::string saved = ::testing::TempDir() + "/exit_save_" + std::to_string(pid) + ".gmem";
  const read_result r = open_file(saved);
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.info.state, trace_state::exited);
  expect_odd_allocations_live(r.value, 10);
  std::remove(saved.c_str());
  const read_result live = open_pid(static_cast<std::uint32_t>(pid));
  ASSERT_TRUE(live);
  remove_shm(live.value.info.object, nullptr);
}

struct object_size {
  std::uint64_t bytes = 0, allocated = 0;
};
object_size size_of_object(std::uint32_t pid) {
  for (const auto& e : list_traces())
    if (e.pid == pid) return {e.bytes, e.allocated_bytes};
  return {};
}

TEST(shm_trace, starts_small_and_grows_with_live_allocations) {
  std::vector<object_size> sizes(2);
  // Default options, as the shim reads them; 300 live allocations, then 100,000.
  auto run = [](int count) {
    return in_child([count] {
      setenv("GMEM_TRACE_KEEP", "all", 1);
      recorder_init(recorder_options::from_env());
      trace_writer* w = recorder_writer();
      if (!w) _exit(3);
      for (int i = 1; i <= count; ++i)
        w->alloc(static_cast<std::uintptr_t>(i) << 12, 100, 512, 0, 0, alloc_kind::device, 0);
      recorder_shutdown();
      _exit(0);
    });
  };
  for (int k = 0; k < 2; ++k) {
    const auto [status, err] = run(k == 0 ? 300 : 100'000);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
    sizes[k] = size_of_object(last_child);
    const read_result r = open_pid(last_child);
    ASSERT_TRUE(r) << r.error.to_string();
    EXPECT_EQ(r.value.live.size(), k == 0 ? 300u : 100'000u);
    EXPECT_EQ(r.value.losses.live_overflow, 0u);
    EXPECT_EQ(r.value.info.total_bytes, sizes[k].bytes);
    EXPECT_TRUE(remove_shm(r.value.info.object, nullptr));
  }
  EXPECT_LE(sizes[0].bytes, std::uint64_t{4} << 20); // a few hundred live: at most 4 MiB
  EXPECT_LE(sizes[0].allocated, sizes[0].bytes + 4096);
  EXPECT_GT(sizes[1].bytes, sizes[0].bytes + 100'000ull * 64); // grew with them
  // Slots at a load of 1/3 to 1/2, the tables they outgrew, and 100,000 events.
  EXPECT_LT(sizes[1].bytes, sizes[0].bytes + 100'000ull * 384);
}

// The size of this process's trace object (0 when it has none), and a wait of at most 5 s for
// the recorder's helper to grow it to `bytes`.
std::uint64_t file_bytes() {
  struct stat st {};
  const std::string path = "/dev/shm/" + recorder_object_name();
  return ::stat(path.c_str(), &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}
void wait_for_file_bytes(std::uint64_t bytes) {
  for (int ms = 0; ms < 5000 && file_bytes() < bytes; ++ms)
    usleep(1000);
}

// Whether every page of [p, p + bytes) is in this process's page tables (/proc/self/pagemap's
// present bit), i.e. a store there takes no page fault.
bool mapped_in(const void* p, std::uint64_t bytes) {
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const auto first = reinterpret_cast<std::uintptr_t>(p) / 4096;
  bool all = true;
  for (std::uint64_t i = 0; all && i < (bytes + 4095) / 4096; ++i) {
    std::uint64_t entry = 0;
    all = ::pread(fd, &entry, sizeof entry, static_cast<off_t>((first + i) * sizeof entry)) ==
              static_cast<ssize_t>(sizeof entry) &&
          (entry >> 63) == 1;
  }
  ::close(fd);
  return all;
}

// An event lane's next chunk is grown by the recorder's helper thread once the lane announces
// it (three quarters through its last chunk): the object grows while the writing thread
// records nothing more, and the chunk is then allocated without growing it again. The growth
// counters (GMEM_VERBOSE's trace_growth line) say so.
TEST(shm_trace, the_next_event_chunk_is_grown_ahead_off_the_writing_thread) {
  const auto [status, err] = in_child([] {
    recorder_options o = small_recorder(); // lanes of 512, then 1024 events
    o.keep = keep_mode::none;
    recorder_init(o);
    trace_writer* w = recorder_writer();
    if (!w) _exit(3);
    // Making the object and its sections is no stall.
    if (const trace_growth g = recorder_growth(); g.ahead != 0 || g.stalls != 0) _exit(7);
    for (int i = 0; i < 384; ++i) // the lane's first chunk: made by the first marker's thread
      w->marker("m");
    const std::uint64_t before = file_bytes();
    if (before != w->total_bytes()) _exit(4); // nothing announced yet
    const std::uint64_t stalls = recorder_growth().stalls;
    if (stalls == 0 || recorder_growth().ahead != 0) _exit(9);
    w->marker("m"); // event 385: index 384, the last quarter of the first chunk
    const std::uint64_t chunk = 512 * 64;
    wait_for_file_bytes(before + chunk);
    if (file_bytes() != before + chunk || w->total_bytes() != before) _exit(5);
    for (int ms = 0; ms < 5000 && recorder_growth().ahead == 0; ++ms) // its pages made too
      usleep(1000);
    // ... and mapped in by the helper: the writer takes no page fault in the chunk.
    if (!mapped_in(static_cast<const std::byte*>(w->data()) + before, chunk)) _exit(10);
    for (int i = 385; i < 513; ++i) // into the second chunk
      w->marker("m");
    if (w->total_bytes() != before + chunk || file_bytes() != before + chunk) _exit(6);
    // The helper's growth, counted with its page work; the writer found the chunk made.
    const trace_growth g = recorder_growth();
    if (g.ahead != 1 || g.ahead_bytes != chunk || g.ahead_max_ns == 0 ||
        g.ahead_ns != g.ahead_max_ns || g.populate_max_ns == 0 || g.stalls != stalls)
      _exit(8);
    recorder_shutdown();
    _exit(0);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ": " << err;
}

// A chunk announced and never reached is given back at shutdown: the object left in /dev/shm
// holds what the trace uses. A hook after shutdown that reaches the chunk grows it again.
TEST(shm_trace, shutdown_gives_back_a_chunk_announced_and_not_reached) {
  const auto [status, err] = in_child([] {
    recorder_options o = small_recorder();
    o.config.events = 4096; // lanes of 512, 1024, 2048, then 4096 events
    o.keep = keep_mode::all;
    recorder_init(o);
    trace_writer* w = recorder_writer();
    if (!w) _exit(3);
    for (int i = 0; i < 385; ++i) // the last quarter of the first chunk: the next announced
      w->marker("m");
    const std::uint64_t used = w->total_bytes();
    const std::uint64_t stalls = recorder_growth().stalls;
    wait_for_file_bytes(used + 512 * 64);
    if (file_bytes() != used + 512 * 64) _exit(4);
    recorder_shutdown();
    if (file_bytes() != used || w->total_bytes() != used) _exit(5);
    for (int i = 385; i < 600; ++i) // a late hook: into the second chunk, grown again
      w->marker("m");
    if (w->total_bytes() != used + 512 * 64 || file_bytes() != used + 512 * 64) _exit(6);
    // The late hook made the chunk itself: a stall.
    if (const trace_growth g = recorder_growth(); g.ahead != 1 || g.stalls != stalls + 1) _exit(8);
    for (int i = 600; i < 900; ++i) // past half of it (it came late): the next announced, and
      w->marker("m");               // not grown ahead after shutdown
    usleep(200 * 1000);
    if (file_bytes() != used + 512 * 64) _exit(7);
    _exit(0);
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "status " << (WIFEXITED(status) ? WEXITSTATUS(status) : -1) << ": " << err;
  const read_result r = open_pid(last_child);
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.info.total_bytes, size_of_object(last_child).bytes);
  EXPECT_TRUE(remove_shm(r.value.info.object, nullptr));
}

TEST(shm_trace, a_limit_stops_growth_with_one_warning_and_counts_what_is_lost) {
  const auto [status, err] = in_child([] {
    setenv("GMEM_TRACE_MAX", "2M", 1);
    setenv("GMEM_TRACE_KEEP", "all", 1);
    recorder_init(recorder_options::from_env());
    trace_writer* w = recorder_writer();
    if (!w) _exit(3);
    for (int i = 1; i <= 100'000; ++i) {
      w->alloc(static_cast<std::uintptr_t>(i) << 12, 100, 512, 0, 0, alloc_kind::device, 0);
      w->marker("m");
    }
    recorder_shutdown();
    _exit(0);
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err; // never a SIGBUS
  const std::string warning = "gmem: warning: the trace";
  const auto first = err.find(warning);
  ASSERT_NE(first, std::string::npos) << err;
  EXPECT_EQ(err.find(warning, first + 1), std::string::npos) << "warned twice: " << err;
  EXPECT_NE(err.find("GMEM_TRACE_MAX allows 2.00 MiB"), std::string::npos) << err;
  const read_result r = open_pid(last_child);
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_TRUE(r.value.info.full);
  EXPECT_LE(r.value.info.total_bytes, std::uint64_t{2} << 20);
  EXPECT_GT(r.value.losses.live_overflow, 0u);
  EXPECT_GT(r.value.losses.growth_refused, 0u);
  EXPECT_EQ(r.value.live.size() + r.value.losses.live_overflow, 100'000u); // counted, not lost
  EXPECT_EQ(r.value.info.state, trace_state::exited);
  EXPECT_TRUE(remove_shm(r.value.info.object, nullptr));
}

TEST(shm_trace, keep_modes_decide_what_an_exited_process_leaves) {
  struct want {
    const char* keep;
    bool leave_one_live;
    bool kept;
  };
  for (const want& w : {want{"none", true, false}, want{"outstanding", false, false},
                        want{"outstanding", true, true}, want{"all", false, true}}) {
    const auto [status, err] = in_child([&w] {
      setenv("GMEM_TRACE_KEEP", w.keep, 1);
      recorder_init(recorder_options::from_env());
      trace_writer* t = recorder_writer();
      if (!t) _exit(3);
      t->alloc(0x1000, 100, 512, 0, 0, alloc_kind::device, 0);
      t->alloc(0x2000, 100, 512, 0, 0, alloc_kind::device, 0);
      t->free(0x1000, 0, 0, alloc_kind::device);
      if (!w.leave_one_live) t->free(0x2000, 0, 0, alloc_kind::device);
      recorder_shutdown();
      _exit(0);
    });
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
    const read_result r = open_pid(last_child);
    EXPECT_EQ(static_cast<bool>(r), w.kept) << w.keep << " " << w.leave_one_live;
    if (r) {
      EXPECT_EQ(r.value.info.exit_live_count, w.leave_one_live ? 1u : 0u);
      remove_shm(r.value.info.object, nullptr);
    }
  }
}

// A trace of a process that exited `age_s` seconds ago (pid not running: pid 4194000+k).
std::string plant_exited_trace(int k, std::uint64_t age_s) {
  process_identity who = testing::test_identity();
  who.pid = 4'194'000 + static_cast<std::uint32_t>(k);
  who.proc_start_ticks = 5;
  const writer_config c = testing::small_config();
  const std::string name = object_name(who.pid, who.proc_start_ticks);
  bip::shared_memory_object::remove(name.c_str());
  bip::shared_memory_object shm(bip::create_only, name.c_str(), bip::read_write);
  shm.truncate(static_cast<bip::offset_t>(c.map_bytes()));
  bip::mapped_region region(shm, bip::read_write);
  trace_writer w(region.get_address(), c.map_bytes(), c, who);
  w.mark_shutdown();
  auto* h = static_cast<layout::header*>(region.get_address());
  h->exit_realtime_ns -= age_s * 1'000'000'000ull;
  shm.truncate(static_cast<bip::offset_t>(w.total_bytes()));
  return name;
}

TEST(shm_trace, traces_older_than_the_keep_age_are_removed_when_a_trace_is_created) {
  const std::string old_one = plant_exited_trace(1, 7200), recent = plant_exited_trace(2, 60);
  const auto [status, err] = in_child([] {
    setenv("GMEM_TRACE_KEEP_AGE", "1h", 1);
    setenv("GMEM_TRACE_KEEP", "none", 1);
    recorder_init(recorder_options::from_env());
    if (!recorder_writer()) _exit(3);
    recorder_shutdown();
    _exit(0);
  });
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << err;
  EXPECT_FALSE(open_shm(old_one)) << "a trace that ended 2 h ago was kept";
  EXPECT_TRUE(open_shm(recent));
  EXPECT_FALSE(open_pid(last_child)); // GMEM_TRACE_KEEP=none
  remove_shm(recent, nullptr);
  remove_shm(old_one, nullptr);
}

} // namespace
} // namespace gmem::trace

namespace gmem::trace {
namespace {

// The default sizes hold a million live allocations. Not under sanitizers.
TEST(default_capacity, holds_a_million_live_allocations) {
  const writer_config c;
  void* mapping = mmap(nullptr, c.map_bytes(), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  auto* memory = static_cast<std::uint64_t*>(mapping);
  trace_writer w(memory, c.map_bytes(), c, testing::test_identity());
  const std::uint64_t fresh = w.total_bytes();
  EXPECT_LE(fresh, std::uint64_t{1} << 20); // starts under 1 MiB
  const std::uintptr_t ips[] = {0x1000, 0x2000};
  const std::uint32_t stack = w.intern_stack(ips, 2);
  for (std::uintptr_t i = 1; i <= 1'000'000; ++i)
    w.alloc(0x7f0000000000 + (i << 9), 100, 512, 0, 0, alloc_kind::device, stack);
  const read_result r = decode(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(memory), w.total_bytes()));
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.live.size(), 1'000'000u);
  EXPECT_EQ(r.value.losses.live_overflow, 0u);
  EXPECT_EQ(r.value.info.live_capacity, std::uint64_t{1} << 21);
  // Sized to use: a million live allocations (their slots, the tables they outgrew and a full
  // event ring) take under 224 bytes each; the object of version 1 reserved 176 MiB at start.
  EXPECT_LE(w.total_bytes(), fresh + 1'000'000ull * 224);
  munmap(mapping, c.map_bytes());
}

} // namespace
} // namespace gmem::trace
