// The shared-host cases in the tools (docs/security.md): case 5 (symbolization cannot be steered),
// 7 (nothing raw reaches a terminal), 8 (bounded report) and 9 (reports written safely), over
// hand-built traces.
#include <filesystem>
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include "common/escape.h"
#include "common/safe_file.h"
#include "tests/tools/sample_trace.h"
#include "tools/analysis/leak_report.h"
#include "tools/analysis/trace_facts.h"
#include "tools/export/pickle_writer.h"
#include "tools/export/pytorch_export.h"
#include "tools/render/html_report.h"
#include "tools/render/json_output.h"
#include "tools/render/printers.h"

namespace gmem::tools {
namespace {

using namespace testing;

// A scratch directory removed at the end of the test.
struct scratch {
  std::string dir;
  scratch() {
    char t[] = "/tmp/gmem_tools_XXXXXX";
    dir = mkdtemp(t);
  }
  ~scratch() { (void)std::system(("rm -rf '" + dir + "'").c_str()); }
};

bool has_control_bytes(const std::string& s) {
  for (const unsigned char c : s)
    if ((c < 0x20 && c != '\n') || c == 0x7f) return true;
  return false;
}

TEST(escape_text, control_bytes_and_bad_utf8_become_visible) {
  EXPECT_EQ(escape_text("plain ./app --x"), "plain ./app --x");
  EXPECT_EQ(escape_text("caf\xc3\xa9 \xe2\x9c\x93"), "caf\xc3\xa9 \xe2\x9c\x93"); // UTF-8 stays
  EXPECT_EQ(escape_text("\x1b]0;owned\x07\x1b[2J"), "\\x1b]0;owned\\x07\\x1b[2J");
  EXPECT_EQ(escape_text("a\nb\tc\rd\x7f"), "a\\nb\\tc\\rd\\x7f");
  EXPECT_EQ(escape_text("\xc2\x9b"
                        "2J"),
            "\\u009b2J"); // C1 CSI
  EXPECT_EQ(escape_text("bad \xff\xfe end \xc3"), "bad \\xff\\xfe end \\xc3");
  EXPECT_EQ(escape_text("\xc0\xaf"), "\\xc0\\xaf");          // overlong '/'
  EXPECT_EQ(escape_text("\xed\xa0\x80"), "\\xed\\xa0\\x80"); // a surrogate
  EXPECT_EQ(escape_text("back\\slash"), "back\\\\slash");
  EXPECT_EQ(valid_utf8("ok \xff end \xc3\xa9"), "ok \xef\xbf\xbd end \xc3\xa9");
}

// Case 7: a command line, paths and symbols holding terminal escapes print escaped.
TEST(escape_text, printers_never_emit_raw_escapes) {
  auto t = sample_trace();
  t.info.command_line = "./app \x1b]0;pwned\x07\x1b[2J\xff";
  t.info.source = "/tmp/\x1b[31mred.gmem";
  t.modules[0].path = "/opt/\x1b[1mlib.so";
  symbolizer symbols(module_ranges(t));
  const leak_report r = build_leak_report(t, symbols, leak_filter{});
  for (const std::string& out : {print_leaks(t, r, print_options{}), print_stats(t),
                                 print_leaks(t, r, print_options{8, 64, true})}) {
    EXPECT_FALSE(has_control_bytes(out)) << out;
    EXPECT_NE(out.find("\\x1b]0;pwned\\x07"), std::string::npos) << out;
  }
  // JSON keeps the real text (escaped by JSON itself) and stays valid with invalid UTF-8.
  const std::string json =
      leaks_json(t, r).dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
  EXPECT_FALSE(has_control_bytes(json));
  EXPECT_NE(json.find("\\u001b]0;pwned"), std::string::npos) << json;
  // The pickle's strings must be UTF-8 for Python to load it.
  const std::string pickle = encode_pickle(pytorch_snapshot(t, symbols));
  EXPECT_EQ(pickle.find("\xff"), std::string::npos);
}

// Case 5: a module path that is a FIFO must not hang symbolization; a file whose build id is
// not the recorded one, or a module with no recorded build id, is not used.
TEST(symbolizer_safety, a_fifo_or_an_unverified_file_is_not_used) {
  scratch s;
  const std::string fifo = s.dir + "/libhang.so";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  char self[4096];
  const auto n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  std::vector<module_range> modules = {
      {fifo, 0x100000, 0x1000, 0x100000, "00112233", false, {}},
      {self, 0x200000, 0x1000, 0x200000, "", false, {}},
      {self, 0x300000, 0x1000, 0x300000, "0011223344556677", false, {}}};
  const auto t0 = std::chrono::steady_clock::now();
  symbolizer symbols(modules); // before the fix: blocks for ever in open() of the FIFO
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  const frame_info& f = symbols.resolve(0x100010);
  EXPECT_EQ(f.function, "");
  EXPECT_NE(f.note.find("not a regular file"), std::string::npos) << f.note;
  EXPECT_NE(symbols.resolve(0x200010).note.find("no build id recorded"), std::string::npos);
  EXPECT_TRUE(symbols.resolve(0x300010).stale);
  EXPECT_NE(symbols.resolve(0x300010).note.find("rebuilt"), std::string::npos);
}

// The symbolizer's child holds only its socket (and /dev/null as 0-2): not the reader's other
// descriptors (the exporter's listening socket, its clients, other children's sockets); it
// runs with an address-space limit, no new privileges, and under a root reader as the trace's
// owner (here nobody) with no supplementary groups.
TEST(symbolizer_safety, the_child_is_confined) {
  char self[4096];
  const auto n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  const int listener = socket(AF_INET, SOCK_STREAM, 0); // open without O_CLOEXEC, like civetweb's
  ASSERT_GE(listener, 0);
  symbolizer symbols({{self, 0x200000, 0x1000, 0x200000, "0011", false, {}}});
  symbols.run_as(65534);
  (void)symbols.resolve(0x200010); // starts the child
  const int pid = symbols.helper_pid();
  ASSERT_GT(pid, 0);
  if (geteuid() != 0) GTEST_SKIP() << "the child is not dumpable: only root reads its /proc";
  const std::string proc = "/proc/" + std::to_string(pid);
  std::vector<std::string> open_fds;
  std::error_code no_access;
  std::filesystem::directory_iterator fds(proc + "/fd", no_access);
  if (no_access) GTEST_SKIP() << "cannot read " << proc << "/fd: " << no_access.message();
  for (const auto& e : fds) {
    const std::string target = std::filesystem::read_symlink(e.path()).string();
    if (target != "/dev/null" && target != self) // the module it reads is its own to open
      open_fds.push_back(e.path().filename().string() + " " + target);
  }
  ASSERT_EQ(open_fds.size(), 1u) << ::testing::PrintToString(open_fds);
  EXPECT_NE(open_fds[0].find("socket:"), std::string::npos) << open_fds[0];
  std::ifstream status(proc + "/status");
  std::string line, uid, groups, no_new_privs;
  while (std::getline(status, line)) {
    if (line.rfind("Uid:", 0) == 0) uid = line;
    if (line.rfind("Groups:", 0) == 0) groups = line;
    if (line.rfind("NoNewPrivs:", 0) == 0) no_new_privs = line;
  }
  EXPECT_EQ(no_new_privs, "NoNewPrivs:\t1");
  if (geteuid() == 0) {
    EXPECT_EQ(uid, "Uid:\t65534\t65534\t65534\t65534");
    EXPECT_EQ(groups.find_first_of("0123456789"), std::string::npos) << groups;
  }
  std::ifstream limits(proc + "/limits");
  bool limited = false;
  while (std::getline(limits, line))
    if (line.rfind("Max address space", 0) == 0)
      limited = line.find("unlimited") == std::string::npos;
  EXPECT_TRUE(limited);
  close(listener);
}

// The symbolizer child's "Max address space" soft limit, in bytes, once it serves `modules`
// (0 when it cannot be read).
std::uint64_t child_address_limit(const std::vector<module_range>& modules) {
  symbolizer symbols(modules);
  (void)symbols.resolve(modules[0].start + 0x10); // starts the child: the limit is set by then
  const int pid = symbols.helper_pid();
  if (pid <= 0) return 0;
  std::ifstream limits("/proc/" + std::to_string(pid) + "/limits");
  std::string line;
  while (std::getline(limits, line))
    if (line.rfind("Max address space", 0) == 0)
      return std::strtoull(line.c_str() + std::strlen("Max address space"), nullptr, 10);
  return 0;
}

// elfutils maps each module whole (PyTorch's libraries are hundreds of MiB): the child's
// address-space limit grows by the bytes of the module files it opened, and a sparse file,
// which holds none, earns nothing.
TEST(symbolizer_safety, the_limit_covers_the_module_files) {
  if (geteuid() != 0) GTEST_SKIP() << "the child is not dumpable: only root reads its /proc";
  char self[4096];
  const auto n = readlink("/proc/self/exe", self, sizeof self - 1);
  ASSERT_GT(n, 0);
  self[n] = '\0';
  scratch s;
  constexpr std::uint64_t k_mib = 1u << 20;
  const std::string big = s.dir + "/libbig.so", sparse = s.dir + "/libsparse.so";
  int fd = open(big.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(posix_fallocate(fd, 0, 256 * k_mib), 0);
  close(fd);
  fd = open(sparse.c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 1024 * k_mib), 0);
  close(fd);
  const module_range own{self, 0x200000, 0x1000, 0x200000, "0011", false, {}};
  const std::uint64_t alone = child_address_limit({own});
  ASSERT_GT(alone, 0u); // what the child inherits counts too (terabytes of shadow under ASan)
  const std::uint64_t with_big =
      child_address_limit({own, {big, 0x10000000, 0x1000, 0x10000000, "0022", false, {}}});
  const std::uint64_t with_sparse =
      child_address_limit({own, {sparse, 0x10000000, 0x1000, 0x10000000, "0022", false, {}}});
  EXPECT_GE(with_big, alone + 224 * k_mib) << alone << " " << with_big;
  EXPECT_LT(with_sparse, alone + 32 * k_mib) << alone << " " << with_sparse;
}

// Case 8: 2000 device ids and 2000 markers make a small report, quickly.
TEST(html_report_bounds, many_device_ids_and_markers_stay_small) {
  auto t = sample_trace();
  for (int i = 0; i < 2000; ++i) { // live allocations of 2000 devices
    auto a = t.live.back();
    a.device = i + 1;
    a.address = 0x100000000000 + static_cast<std::uintptr_t>(i) * 0x100000;
    t.live.push_back(a);
  }
  for (int i = 0; i < 2000; ++i) {
    add_event(t, gmem::trace::event_type::marker, (10 + static_cast<std::uint64_t>(i)) * k_ms, 0, 0,
              0, 0, "marker " + std::to_string(i));
    t.events.back().device = i;
  }
  symbolizer symbols(module_ranges(t));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string html = html_report(t, symbols);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  EXPECT_LT(html.size(), 1u << 20)
      << "a 2000-marker trace gave a " << html.size() << "-byte report";
  const auto note = html.find(" more markers not drawn");
  ASSERT_NE(note, std::string::npos);
  const auto digits = html.rfind('>', note) + 1;
  EXPECT_GE(std::stoul(html.substr(digits, note - digits)), 1800u); // 200 drawn
  std::size_t charts = 0;
  for (auto at = html.find("<svg class=\"timeline\""); at != std::string::npos;
       at = html.find("<svg class=\"timeline\"", at + 1))
    ++charts;
  EXPECT_EQ(charts, 1u); // only device 0 has counters
}

// Case 9: reports never go through a planted symlink, never replace a file without --force,
// and are 0600 whatever the umask.
TEST(write_file_safely, refuses_symlinks_and_existing_files) {
  scratch s;
  const std::string precious = s.dir + "/precious", link = s.dir + "/gmem-report.html";
  { std::ofstream(precious) << "keep me"; }
  ASSERT_EQ(symlink(precious.c_str(), link.c_str()), 0);
  std::string error;
  EXPECT_FALSE(write_file_safely(link, "<html>", false, &error));
  EXPECT_NE(error.find("exists; --force replaces it"), std::string::npos) << error;
  EXPECT_FALSE(write_file_safely(precious, "<html>", false, &error));
  // --force: a new file replaces the symlink; the file it pointed to is untouched.
  const mode_t old = umask(0);
  EXPECT_TRUE(write_file_safely(link, "<html>", true, &error)) << error;
  const std::string fresh = s.dir + "/new.html";
  EXPECT_TRUE(write_file_safely(fresh, "data", false, &error)) << error;
  umask(old);
  std::ifstream in(precious);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me");
  for (const auto& p : {link, fresh}) {
    struct stat st {};
    ASSERT_EQ(lstat(p.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << p;
    EXPECT_EQ(st.st_mode & 0777, 0600u) << p;
  }
  // Only the three files: no temporary left behind.
  EXPECT_EQ(std::system(("test $(ls -A '" + s.dir + "' | wc -l) -eq 3").c_str()), 0);
}

} // namespace
} // namespace gmem::tools
