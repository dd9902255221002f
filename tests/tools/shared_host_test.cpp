// Issue 33 in the tools, over hand-built traces and modules: row 2 (a module path turned into a
// symlink to another user's terminal never becomes the reader's controlling terminal) and row 4
// (a forged device id cannot size what an export allocates). The rows that need the gmem
// command and a second user end to end are in shared_host_e2e_test.sh.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "tests/tools/sample_trace.h"
#include "tools/pytorch_export.h"
#include "tools/symbolizer.h"
#include "tools/trace_facts.h"

namespace gmem::tools {
namespace {

using namespace testing;

constexpr uid_t k_nobody = 65534;

struct scratch {
  std::string dir;
  scratch() {
    char t[] = "/tmp/gmem_i33_XXXXXX";
    dir = mkdtemp(t);
    chmod(dir.c_str(), 01777); // shared and sticky, like /tmp
  }
  ~scratch() { (void)std::system(("rm -rf '" + dir + "'").c_str()); }
};

// Row 2: after recording, the other user replaces the library the module map names with a
// symlink to a pseudo-terminal. A reader started with setsid (as a service is) that symbolizes
// the trace must not take that terminal as its controlling terminal: one ^\ on it would kill
// the reader. The symbolizer runs in a session of its own here, so the check is exact: after
// resolving a frame, it has no controlling terminal (/dev/tty cannot be opened).
TEST(shared_host, a_module_symlinked_to_a_terminal_never_becomes_the_controlling_terminal) {
  scratch s;
  const int master = posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(grantpt(master), 0);
  ASSERT_EQ(unlockpt(master), 0);
  const std::string terminal = ptsname(master);
  const std::string module = s.dir + "/libvictim.so";
  const pid_t planter = fork();
  if (planter == 0) { // the other user plants the symlink (as nobody when we are root)
    if (geteuid() == 0 && (setgid(k_nobody) != 0 || setuid(k_nobody) != 0)) _exit(99);
    _exit(symlink(terminal.c_str(), module.c_str()) == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(planter, &status, 0), planter);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "could not plant the symlink";
  const pid_t reader = fork();
  if (reader == 0) {
    alarm(20);
    if (setsid() < 0) _exit(90); // a session leader with no terminal: the exporter as a service
    symbolizer symbols({{module, 0x100000, 0x1000, 0x100000, "00112233", false, {}}});
    const frame_info& f = symbols.resolve(0x100010);
    if (f.note.find("not a regular file") == std::string::npos) _exit(91);
    const int tty = open("/dev/tty", O_RDWR | O_NOCTTY);
    _exit(tty >= 0 ? 1 : 0); // 1: the pty became our controlling terminal
  }
  ASSERT_EQ(waitpid(reader, &status, 0), reader);
  close(master);
  ASSERT_TRUE(WIFEXITED(status)) << "the reader was killed by signal " << WTERMSIG(status);
  EXPECT_NE(WEXITSTATUS(status), 91) << "the terminal was not noted as not a regular file";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the reader acquired the other user's terminal";
}

// Row 1, the part that needs no file: a module path written with ".." is never followed.
TEST(shared_host, a_module_path_with_dot_dot_is_not_followed) {
  char self[4096];
  const auto n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  const std::string dotted = "/usr/../" + std::string(self + 1);
  symbolizer symbols({{dotted, 0x100000, 0x1000, 0x100000, "00112233", false, {}}});
  const frame_info& f = symbols.resolve(0x100010);
  EXPECT_EQ(f.function, "");
  EXPECT_NE(f.note.find("'..'"), std::string::npos) << f.note;
  EXPECT_EQ(f.name(), f.module.substr(f.module.rfind('/') + 1) + "+0x10");
}

// Row 4: a trace with one marker on device 2^29 (and alloc events on device 2^20) made the
// PyTorch export allocate a list per device id below it (24 GB RSS for 2^29). The export only
// sizes device_traces by the ids of records it exports, up to 1023.
TEST(shared_host, a_forged_device_id_does_not_size_the_pytorch_export) {
  auto t = sample_trace();
  using gmem::trace::event_type;
  add_event(t, event_type::marker, 4000 * k_ms, 0, 0, 0, 0, "forged");
  t.events.back().device = 1 << 29;
  add_event(t, event_type::alloc, 4100 * k_ms, k_seg0 + 4096, 512, 512);
  t.events.back().device = 1 << 20;
  t.events.back().kind = gmem::trace::alloc_kind::device;
  symbolizer symbols(module_ranges(t));
  const auto t0 = std::chrono::steady_clock::now();
  const py_value snapshot = pytorch_snapshot(t, symbols);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  const auto& dict = *std::get<std::shared_ptr<py_dict>>(snapshot.get());
  const py_value* traces = nullptr;
  for (const auto& [key, value] : dict)
    if (key == "device_traces") traces = &value;
  ASSERT_NE(traces, nullptr);
  EXPECT_LE(std::get<std::shared_ptr<py_list>>(traces->get())->size(), 2u)
      << "device_traces sized by a forged id";
}

} // namespace
} // namespace gmem::tools
