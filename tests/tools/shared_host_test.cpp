// The readers' cases of docs/security.md in the tools, over hand-built traces and modules: case R2
// (a module path turned into a symlink to another user's terminal never becomes the reader's
// controlling terminal) and case R4 (a forged device id cannot size what an export allocates). The
// rows that need the gmem command and a second user end to end are in shared_host_e2e_test.sh.
#include <gtest/gtest.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "common/safe_file.h"
#include "profiler/format/module_map.h"
#include "tests/tools/sample_trace.h"
#include "tools/analysis/trace_facts.h"
#include "tools/export/pytorch_export.h"
#include "tools/symbolizer.h"

namespace gmem::tools {
namespace {

using namespace testing;

constexpr uid_t k_nobody = 65534;

struct scratch {
  std::string dir;
  scratch() {
    char t[] = "/tmp/gmem_shared_host_XXXXXX";
    dir = mkdtemp(t);
    chmod(dir.c_str(), 01777); // shared and sticky, like /tmp
  }
  ~scratch() { (void)std::system(("rm -rf '" + dir + "'").c_str()); }
};

// Case R2: after recording, the other user replaces the library the module map names with a
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

// Cases R1 and R2: how every module and debug file is opened. Symlink chains are followed by gmem
// (relative targets from the link's directory), and whatever they end in is looked at before
// anything is opened: a FIFO or a terminal is refused at once, never waited on or acquired.
TEST(shared_host, open_regular_file_follows_links_itself_and_opens_only_regular_files) {
  scratch s;
  const std::string file = s.dir + "/libreal.so.1.2", fifo = s.dir + "/fifo";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fputs("x", f);
    std::fclose(f);
  }
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  ASSERT_EQ(symlink("libreal.so.1.2", (s.dir + "/libreal.so.1").c_str()), 0);
  ASSERT_EQ(symlink((s.dir + "/libreal.so.1").c_str(), (s.dir + "/libreal.so").c_str()), 0);
  ASSERT_EQ(symlink("fifo", (s.dir + "/libhang.so").c_str()), 0);
  ASSERT_EQ(symlink("/dev/null", (s.dir + "/libnull.so").c_str()), 0);
  std::string why;
  int fd = open_regular_file(s.dir + "/libreal.so", true, &why);
  EXPECT_GE(fd, 0) << why;
  if (fd >= 0) close(fd);
  EXPECT_EQ(open_regular_file(s.dir + "/libreal.so", false, &why), -1);
  EXPECT_EQ(why, "a symbolic link");
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(open_regular_file(s.dir + "/libhang.so", true, &why), -1);
  EXPECT_EQ(why, "a FIFO, not a regular file");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(open_regular_file(s.dir + "/libnull.so", true, &why), -1);
  EXPECT_EQ(why, "a character device, not a regular file");
  EXPECT_EQ(open_regular_file(s.dir + "/missing.so", true, &why), -1);
  EXPECT_EQ(errno, ENOENT);
  EXPECT_TRUE(has_dot_dot("/usr/../x"));
  EXPECT_TRUE(has_dot_dot(".."));
  EXPECT_TRUE(has_dot_dot("/a/.."));
  EXPECT_FALSE(has_dot_dot("/a/..b/c../.x"));
}

// Case R1, the part that needs no file: a module path written with ".." is never followed.
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

// This test binary as a module, with its build id, the way a trace records it.
// The module map's entry for `path` (the executable's has an empty path), as a trace records it.
module_range loaded_module(const std::string& path, bool executable) {
  module_range self;
  for (const auto& m : gmem::trace::scan_modules()) {
    if (m.path != path && !(executable && m.path.empty())) continue;
    if (m.start == 0) continue;
    self.path = path;
    self.base = m.load_bias;
    self.start = m.start;
    self.size = m.size;
    for (const unsigned char c : m.build_id) {
      char b[3];
      std::snprintf(b, sizeof b, "%02x", c);
      self.build_id += b;
    }
    break;
  }
  return self;
}

module_range self_module() {
  char path[4096];
  const auto n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return {};
  return loaded_module(std::string(path, static_cast<std::size_t>(n)), true);
}

std::set<pid_t> children_of_self() {
  std::set<pid_t> out;
  std::ifstream f("/proc/self/task/" + std::to_string(getpid()) + "/children");
  for (pid_t p = 0; f >> p;)
    out.insert(p);
  return out;
}

__attribute__((noinline)) int budget_probe_a(int x) {
  return x * 3 + 1;
}
__attribute__((noinline)) int budget_probe_b(int x) {
  return x * 5 + 2;
}

// Cases R1 and R7's "no module can stall a scrape": whatever elfutils does, the reader waits no
// longer than the symbolizer's budget, summed over lookups. Here the child that runs elfutils
// is stopped (as if stuck in an open inside libdw): the next lookup returns within the budget,
// unsymbolized, with a note, and so do all later ones, at once.
TEST(shared_host, a_stalled_symbolizer_costs_at_most_its_budget) {
  const module_range self = self_module();
  ASSERT_FALSE(self.build_id.empty()) << "tools_test was linked without a build id";
  const auto before = children_of_self();
  symbolizer symbols({self}, std::chrono::milliseconds(800));
  const auto a = reinterpret_cast<std::uintptr_t>(&budget_probe_a) + 1;
  const auto b = reinterpret_cast<std::uintptr_t>(&budget_probe_b) + 1;
  EXPECT_NE(symbols.resolve(a).function.find("budget_probe_a"), std::string::npos)
      << symbols.resolve(a).note;
  pid_t helper = 0;
  for (const pid_t p : children_of_self())
    if (!before.count(p)) helper = p;
  ASSERT_GT(helper, 0) << "no symbolizer child";
  ASSERT_EQ(kill(helper, SIGSTOP), 0);
  const auto t0 = std::chrono::steady_clock::now();
  const frame_info& f = symbols.resolve(b);
  const auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_LT(waited, std::chrono::seconds(3));
  EXPECT_EQ(f.function, "");
  EXPECT_NE(f.note.find("budget"), std::string::npos) << f.note;
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_NE(symbols.resolve(b + 1).note.find("budget"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t1, std::chrono::milliseconds(100));
  // The stopped child was killed and reaped.
  EXPECT_EQ(children_of_self().count(helper), 0u);
}

// libdw's own lookup of a dwz alternate file (.gnu_debugaltlink). A library whose DWARF keeps
// its unit's directory in the alternate file (DW_FORM_GNU_strp_alt, as dwz writes it) and whose
// .gnu_debugaltlink names "fifo", a FIFO beside it: at the first line lookup libdw opened that
// FIFO by name, blocking, and the lookup cost the whole budget. libdw now gets only alternate
// files gmem opened; without one, no lines are looked up in that module, and the function is
// still named at once (from the symbol table).
TEST(shared_host, a_dwz_alternate_file_is_opened_by_gmem_or_not_at_all) {
  if (std::system("command -v cc >/dev/null 2>&1") != 0) GTEST_SKIP() << "no cc";
  scratch s;
  const std::string c = s.dir + "/alt.c", as = s.dir + "/alt.s", lib = s.dir + "/libalt.so";
  std::ofstream(c) << "int gmem_altlinked(int x) { return x * 3 + 1; }\n";
  ASSERT_EQ(std::system(("cc -O1 -g -gdwarf-4 -fPIC -S -o '" + as + "' '" + c + "'").c_str()), 0);
  std::string text;
  {
    std::ifstream in(as);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // The unit's DW_AT_comp_dir (0x1b) as DW_FORM_strp (0xe) in the abbreviations becomes
  // DW_FORM_GNU_strp_alt (0x1f21): the same 4-byte offset, into the alternate file's strings.
  const std::string strp = "\t.uleb128 0x1b\n\t.uleb128 0xe\n";
  const auto at = text.find(strp);
  if (at == std::string::npos) GTEST_SKIP() << "cc wrote no DW_AT_comp_dir as DW_FORM_strp";
  text.replace(at, strp.size(), "\t.uleb128 0x1b\n\t.uleb128 0x1f21\n");
  text += "\t.section\t.gnu_debugaltlink,\"\",%progbits\n\t.string\t\"fifo\"\n";
  for (int i = 1; i <= 20; ++i) // the alternate file's build id
    text += "\t.byte\t" + std::to_string(i) + "\n";
  std::ofstream(as) << text;
  ASSERT_EQ(std::system(("cc -shared -Wl,--build-id -o '" + lib + "' '" + as + "'").c_str()), 0);
  ASSERT_EQ(mkfifo((s.dir + "/fifo").c_str(), 0600), 0);
  void* handle = dlopen(lib.c_str(), RTLD_NOW);
  ASSERT_NE(handle, nullptr) << dlerror();
  const auto fn = reinterpret_cast<std::uintptr_t>(dlsym(handle, "gmem_altlinked"));
  ASSERT_NE(fn, 0u);
  const module_range m = loaded_module(lib, false);
  ASSERT_FALSE(m.build_id.empty()) << "libalt.so is not in the module map";
  symbolizer symbols({m}, std::chrono::milliseconds(3000));
  const auto t0 = std::chrono::steady_clock::now();
  const frame_info& f = symbols.resolve(fn + 1);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
  EXPECT_EQ(f.function, "gmem_altlinked") << f.note;
  EXPECT_EQ(f.file, "");
  dlclose(handle);
}

// Case R4: a trace with one marker on device 2^29 (or alloc events on device 2^20) made the
// PyTorch export allocate a list per device id below it (24 GB RSS for 2^29). The export only
// sizes device_traces by the ids of records it exports, up to 1023.
TEST(shared_host, a_forged_device_id_does_not_size_the_pytorch_export) {
  auto t = sample_trace();
  using gmem::trace::event_type;
  // 2^20, not 2^29: before the fix this test then fails on its assertion at about 100 MB
  // instead of taking the machine's memory (the 2^29 trace is in the fuzz corpus).
  add_event(t, event_type::marker, 4000 * k_ms, 0, 0, 0, 0, "forged");
  t.events.back().device = 1 << 20;
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
