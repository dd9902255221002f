// Cases 1-4 and 6 of docs/security.md: another local user plants files where gmem reads and writes.
// When the tests run as root, the attacker runs as uid/gid 65534 (nobody); otherwise as the
// same user, which still exercises every check except ownership. Readers run in forked
// children with an alarm, so a hang or a SIGBUS fails the test instead of killing the suite.
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profiler/format/trace_layout.h"
#include "profiler/reader/object_names.h"
#include "profiler/reader/pid_lookup.h"
#include "profiler/reader/process_identity.h"
#include "profiler/reader/trace_listing.h"
#include "profiler/reader/trace_open.h"
#include "profiler/reader/trace_reader.h"
#include "profiler/reader/trace_save.h"
#include "profiler/recorder/recorder.h"
#include "tests/profiler/test_buffer.h"

namespace gmem::trace {
namespace {

constexpr std::uint32_t k_nobody = 65534;

// Runs `body` in a child as the attacker (nobody when we are root). Returns its exit status
// or -1 when it could not switch user.
int as_attacker(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (geteuid() == 0 && (setgid(k_nobody) != 0 || setuid(k_nobody) != 0)) _exit(99);
    _exit(body());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Runs `body` (a reader) in a child with a time limit. Returns "" when it exited 0, else what
// happened ("killed by signal 7 (Bus error)", "timed out", "exit 1").
std::string run_reader(const std::function<bool()>& body, unsigned seconds = 20) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(seconds);
    _exit(body() ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status))
    return WEXITSTATUS(status) == 0 ? "" : "exit " + std::to_string(WEXITSTATUS(status));
  if (WTERMSIG(status) == SIGALRM) return "timed out (hung)";
  return "killed by signal " + std::to_string(WTERMSIG(status)) + " (" +
         strsignal(WTERMSIG(status)) + ")";
}

// A complete trace image of (pid, ticks), as a writer would leave it.
std::vector<char> trace_image(std::uint32_t pid, std::uint64_t ticks) {
  process_identity who = testing::test_identity();
  who.pid = pid;
  who.proc_start_ticks = ticks;
  who.argv = {"attacker"};
  testing::trace_buffer b(testing::small_config(), who);
  for (int i = 0; i < 40; ++i) {
    b.writer->alloc(static_cast<std::uintptr_t>(i + 1) << 12, 100, 512, 0, 0, alloc_kind::device,
                    0);
    b.writer->marker("m");
  }
  const auto bytes = b.bytes();
  return {reinterpret_cast<const char*>(bytes.data()),
          reinterpret_cast<const char*>(bytes.data()) + bytes.size()};
}

bool write_new(const std::string& path, const std::vector<char>& data) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return false;
  const bool ok = write(fd, data.data(), data.size()) == static_cast<ssize_t>(data.size());
  return close(fd) == 0 && ok;
}

// A pid that is not running now (a reaped child's).
std::uint32_t dead_pid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return static_cast<std::uint32_t>(pid);
}

// A dead process's trace is found even when the reader runs in the tick the process started
// in: "now" comes from /proc/uptime in whole ticks, not through a double (1234.57 s x 100 is
// 123456.99999999999 as doubles: one tick short, so the trace looked as if it came from the
// future and was refused).
TEST(process_identity, the_tick_after_uptime_is_exact) {
  EXPECT_EQ(ticks_after_uptime("1234.57 98765.43", 100), 123458u);
  EXPECT_EQ(ticks_after_uptime("1234.57", 100), 123458u);
  EXPECT_EQ(ticks_after_uptime("0.00 0.00", 100), 1u);
  EXPECT_EQ(ticks_after_uptime("17.5", 1000), 17501u);
  EXPECT_EQ(ticks_after_uptime("1234.57", 0), 123458u); // no CLK_TCK: 100
  for (const char* bad : {"", "x", ".5", "-3.00", "1234567890123.00"})
    EXPECT_EQ(ticks_after_uptime(bad, 100), ~std::uint64_t{0}) << bad;
}

// Case 4: a FIFO named like a trace must not hang ps, list_traces or open_pid.
TEST(shm_security, a_fifo_named_like_a_trace_hangs_no_reader) {
  const std::uint32_t pid = dead_pid();
  const std::string name = object_name(pid, 12345);
  const std::string path = "/dev/shm/" + name;
  ASSERT_EQ(as_attacker([&] { return mkfifo(path.c_str(), 0666) == 0 ? 0 : 1; }), 0);
  const std::string listed = run_reader([&] {
    for (const auto& e : list_traces())
      if (e.name == name) return !e.readable && e.problem.find("FIFO") != std::string::npos;
    return false;
  });
  EXPECT_EQ(listed, "") << "list_traces on a FIFO";
  EXPECT_EQ(run_reader([&] { return !open_shm(name); }), "") << "open_shm on a FIFO";
  EXPECT_EQ(run_reader([&] { return !open_pid(pid); }), "") << "open_pid on a FIFO";
  unlink(path.c_str());
}

// Case 3: an object its owner keeps truncating and regrowing must not crash a reader (SIGBUS
// when the reader decodes a shared mapping in place).
TEST(shm_security, a_truncating_object_never_crashes_a_reader) {
  const std::uint32_t pid = dead_pid();
  const std::string name = object_name(pid, 4321);
  const std::string path = "/dev/shm/" + name;
  const auto image = trace_image(pid, 4321);
  int go[2];
  ASSERT_EQ(pipe(go), 0);
  const pid_t attacker = fork();
  if (attacker == 0) {
    close(go[0]);
    if (geteuid() == 0 && (setgid(k_nobody) != 0 || setuid(k_nobody) != 0)) _exit(99);
    if (!write_new(path, image)) _exit(2);
    if (write(go[1], "x", 1) != 1) _exit(3);
    const int fd = open(path.c_str(), O_RDWR);
    for (;;) { // until killed
      if (ftruncate(fd, 4096) != 0) _exit(4);
      if (pwrite(fd, image.data(), image.size(), 0) != static_cast<ssize_t>(image.size())) _exit(5);
    }
  }
  close(go[1]);
  char c;
  ASSERT_EQ(read(go[0], &c, 1), 1);
  close(go[0]);
  const std::string result = run_reader([&] {
    for (int i = 0; i < 300; ++i) {
      (void)open_shm(name);
      (void)open_pid(pid);
      if (i % 50 == 0) (void)list_traces(); // slower: reads every object on the host
    }
    return true;
  });
  kill(attacker, SIGKILL);
  waitpid(attacker, nullptr, 0);
  unlink(path.c_str());
  EXPECT_EQ(result, "") << "300 reads of an object being truncated";
}

// Case 6: an object planted with the victim's pid and a forged start time (2^64-1) is never
// chosen for that pid, whether the victim runs or has exited.
TEST(shm_security, a_forged_start_time_does_not_stand_in_for_a_pid) {
  recorder_options o;
  o.config = testing::small_config();
  o.config.sample_interval_ns = 5'000'000;
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t victim = fork();
  if (victim == 0) {
    close(ready[0]);
    close(done[1]);
    recorder_init(o);
    if (recorder_writer() == nullptr) _exit(3);
    recorder_writer()->marker("victim");
    if (write(ready[1], "x", 1) != 1) _exit(4);
    char c;
    if (read(done[0], &c, 1) < 0) _exit(5); // until the parent closes the pipe
    recorder_shutdown();
    _exit(0);
  }
  close(ready[1]);
  close(done[0]);
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  const auto pid = static_cast<std::uint32_t>(victim);
  const std::string forged = object_name(pid, ULLONG_MAX);
  const std::string forged_path = "/dev/shm/" + forged;
  const auto image = trace_image(pid, ULLONG_MAX);
  ASSERT_EQ(as_attacker([&] { return write_new(forged_path, image) ? 0 : 1; }), 0);
  auto check = [&](const char* when) {
    const read_result r = open_pid(pid);
    ASSERT_TRUE(r) << when << ": " << r.error.to_string();
    EXPECT_NE(r.value.info.proc_start_ticks, ULLONG_MAX) << when << ": chose the forged object";
    EXPECT_NE(r.value.info.command_line, "attacker") << when;
    EXPECT_EQ(find_pid_object(pid).name, r.value.info.object) << when;
  };
  check("victim running");
  close(done[1]);
  int status = 0;
  ASSERT_EQ(waitpid(victim, &status, 0), victim);
  check("victim exited");
  const read_result mine = open_pid(pid);
  unlink(forged_path.c_str());
  if (mine) remove_shm(mine.value.info.object, nullptr);
}

// An object whose header names another process than its name does is refused.
TEST(shm_security, a_header_that_contradicts_the_name_is_refused) {
  const std::uint32_t pid = dead_pid();
  const std::string name = object_name(pid, 99);
  const auto image = trace_image(pid, 98);
  ASSERT_TRUE(write_new("/dev/shm/" + name, image));
  const read_result r = open_shm(name);
  EXPECT_FALSE(r);
  EXPECT_NE(r.error.message.find("not the trace its name claims"), std::string::npos)
      << r.error.to_string();
  unlink(("/dev/shm/" + name).c_str());
}

// Peak RSS since the last reset_peak_rss(), in bytes (VmHWM).
std::uint64_t peak_rss() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}
void reset_peak_rss() {
  std::ofstream("/proc/self/clear_refs") << "5";
}

// Another user's large object (real data, no holes) whose first page is a trace header that
// claims 2^62 bytes, or names another process than the object's name: refused after its first
// page, never copied whole (it used to be copied whole, up to four times, per name). Ten hard
// links to one object are listed once.
TEST(shm_security, a_large_forged_object_costs_a_reader_one_page) {
  constexpr std::size_t k_bytes = std::size_t{192} << 20;
  const std::uint32_t pid = dead_pid();
  const std::string huge = object_name(pid, 501, 0x1111), other = object_name(pid, 502, 0x2222);
  std::vector<char> image = trace_image(pid, 501);
  image.resize(k_bytes, 'x');
  const std::uint64_t claim = std::uint64_t{1} << 62;
  std::memcpy(image.data() + offsetof(layout::header, total_bytes), &claim, sizeof claim);
  std::vector<std::string> links;
  ASSERT_EQ(
      as_attacker([&] {
        if (!write_new("/dev/shm/" + huge, image)) return 1;
        std::uint64_t real = k_bytes;
        std::memcpy(image.data() + offsetof(layout::header, total_bytes), &real, sizeof real);
        if (!write_new("/dev/shm/" + other, image)) return 1; // header: ticks 501, not 502
        for (int i = 0; i < 10; ++i)
          if (link(("/dev/shm/" + huge).c_str(),
                   ("/dev/shm/" + object_name(pid, 600 + static_cast<std::uint64_t>(i))).c_str()) !=
              0)
            return 1;
        return 0;
      }),
      0);
  for (int i = 0; i < 10; ++i)
    links.push_back("/dev/shm/" + object_name(pid, 600 + static_cast<std::uint64_t>(i)));
  EXPECT_EQ(run_reader([&] {
              reset_peak_rss();
              const auto before = peak_rss();
              const read_result a = open_shm(huge), b = open_shm(other);
              const auto grown = peak_rss() - before;
              std::size_t listed = 0;
              for (const trace_entry& e : list_traces())
                listed += e.pid == pid;
              const auto after_list = peak_rss() - before;
              std::fprintf(stderr, "peak RSS grew by %llu KiB (reads), %llu KiB (listing)\n",
                           static_cast<unsigned long long>(grown >> 10),
                           static_cast<unsigned long long>(after_list >> 10));
              return !a && a.error.message.find("forged or damaged") != std::string::npos && !b &&
                     b.error.message.find("not the trace its name claims") != std::string::npos &&
                     grown < (std::uint64_t{16} << 20) && after_list < (std::uint64_t{16} << 20) &&
                     listed == 2; // `huge` (one of its 11 names) and `other`
            }),
            "");
  unlink(("/dev/shm/" + huge).c_str());
  unlink(("/dev/shm/" + other).c_str());
  for (const auto& l : links)
    unlink(l.c_str());
}

// Cases 1 and 2: saving a trace writes only a file it created itself, beside the target:
// neither a pre-created temp file of the old name (<path>.tmp<pid>) nor a symlink planted at
// the target receives the bytes, and the result is 0600 whatever the umask.
TEST(shm_security, saving_writes_only_its_own_file) {
  char dir_template[] = "/tmp/gmem_save_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  chmod(dir.c_str(), 01777); // a shared, sticky directory like /tmp
  const std::string path = dir + "/victim.gmem";
  const std::string old_tmp = path + ".tmp" + std::to_string(getpid());
  const std::string victim_file = dir + "/precious";
  { std::ofstream(victim_file) << "keep me"; }
  chmod(victim_file.c_str(), 0600);
  ASSERT_EQ(as_attacker([&] {
              const int fd = open(old_tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0666);
              if (fd < 0) return 1;
              fchmod(fd, 0666);
              close(fd);
              return 0;
            }),
            0);
  ASSERT_EQ(symlink(victim_file.c_str(), path.c_str()), 0); // case 2: the target is a symlink
  const auto image = trace_image(4242, 777);
  const mode_t old_umask = umask(0);
  std::string error;
  const bool saved = save_bytes(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(image.data()), image.size()),
      path, false, &error);
  // Case R12: a symlink at the target is neither followed nor replaced.
  EXPECT_FALSE(saved) << "saved over a symlink";
  EXPECT_NE(error.find("a symbolic link"), std::string::npos) << error;
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the symlink at the target was replaced";
  ASSERT_EQ(unlink(path.c_str()), 0);
  const bool saved_fresh = save_bytes(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(image.data()), image.size()),
      path, false, &error);
  umask(old_umask);
  ASSERT_TRUE(saved_fresh) << error;
  ASSERT_EQ(stat(old_tmp.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0) << "the attacker's pre-created temp file got the trace";
  std::ifstream in(victim_file);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me") << "the file behind the symlink was overwritten";
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(open_file(path)) << "the saved file reads back";
  // Saving again replaces our own regular file.
  EXPECT_TRUE(save_bytes(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(image.data()), image.size()),
      path, false, &error))
      << error;
  for (const auto& f : {old_tmp, path, victim_file})
    unlink(f.c_str());
  EXPECT_EQ(rmdir(dir.c_str()), 0) << "a temporary file was left behind";
}

// Case 8, end to end: a small hostile trace file (2000 device ids, 2000 markers, 2000 fences)
// makes `gmem report` write a small report quickly.
TEST(shm_security, a_small_hostile_trace_makes_a_small_report) {
  const char* build = std::getenv("GMEM_BUILD");
  const std::string gmem = std::string(build != nullptr ? build : "build") + "/bin/gmem";
  if (access(gmem.c_str(), X_OK) != 0) GTEST_FAIL() << gmem << " not built (make test builds it)";
  writer_config c = testing::small_config();
  c.events = 8192;
  c.live_slots = 4096;
  c.string_slots = 256;
  process_identity who = testing::test_identity();
  testing::trace_buffer b(c, who);
  for (int i = 0; i < 2000; ++i) {
    b.writer->alloc(static_cast<std::uintptr_t>(i + 1) << 20, 512, 512, i, 0, alloc_kind::device,
                    0);
    b.writer->marker("marker " + std::to_string(i % 100));
    b.writer->fence(i, 1000, 512);
  }
  device_stats stats[2] = {};
  stats[0].device = 0;
  stats[1].device = 1;
  b.writer->sample(stats, 2, sample_reason::final);
  char dir_template[] = "/tmp/gmem_hostile_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template, file = dir + "/hostile.gmem", out = dir + "/r.html";
  std::string error;
  ASSERT_TRUE(save_bytes(b.bytes(), file, false, &error)) << error;
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_LT(st.st_size, 2 << 20) << "the hostile file is meant to be small";
  const std::string cmd =
      "timeout 30 '" + gmem + "' report '" + file + "' -o '" + out + "' >/dev/null 2>&1";
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = std::system(cmd.c_str());
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(WEXITSTATUS(rc), 0) << cmd;
  EXPECT_LT(took, std::chrono::seconds(10));
  ASSERT_EQ(stat(out.c_str(), &st), 0);
  EXPECT_LT(st.st_size, 1 << 20) << "a " << st.st_size << "-byte report";
  EXPECT_EQ(std::system(("rm -rf '" + dir + "'").c_str()), 0);
}

} // namespace
} // namespace gmem::trace
