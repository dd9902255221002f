// End to end: a program run under libgmem.so (against the fake driver) leaves a trace from
// which the reader recovers exactly its live allocations, sizes and call sites: while it runs,
// after it exits, and after SIGKILL. Skips when the shim or the fake driver is not built.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <gtest/gtest.h>
#include <map>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "profiler/reader/pid_lookup.h"
#include "profiler/reader/trace_reader.h"
#include "profiler/reader/trace_save.h"

namespace gmem::trace {
namespace {

std::string build_dir() {
  const char* b = std::getenv("GMEM_BUILD");
  return b ? b : "build";
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

struct expected_block {
  std::uint64_t requested;
  char site;
};

struct program {
  pid_t pid = -1;
  std::map<std::uintptr_t, expected_block> live;
  std::map<char, std::uintptr_t> sites;
};

// Starts the program under the shim and reads its report up to "ready".
program start(const char* mode, int count) {
  const std::string b = build_dir();
  int out[2];
  program p;
  if (pipe(out) != 0) return p;
  p.pid = fork();
  if (p.pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    setenv("LD_PRELOAD", (b + "/lib/libgmem.so").c_str(), 1);
    setenv("LD_LIBRARY_PATH", (b + "/tests/fake_cuda").c_str(), 1);
    setenv("GMEM_TRACE", "1", 1);
    setenv("GMEM_STACK_DEPTH", "16", 1);
    setenv("GMEM_TRACE_LIVE", "65536", 1); // small object: tests run in parallel CI
    setenv("GMEM_TRACE_EVENTS", "65536", 1);
    const std::string prog = b + "/tests/trace_e2e_program";
    execl(prog.c_str(), prog.c_str(), mode, std::to_string(count).c_str(), nullptr);
    _exit(127);
  }
  close(out[1]);
  FILE* f = fdopen(out[0], "r");
  char line[256];
  while (f && std::fgets(line, sizeof line, f)) {
    std::istringstream in(line);
    std::string word;
    in >> word;
    if (word == "ready") break;
    if (word == "site") {
      char s;
      std::string hex;
      in >> s >> hex;
      p.sites[s] = std::stoull(hex, nullptr, 16);
    } else if (word == "live") {
      unsigned long long a, n;
      char s;
      in >> a >> n >> s;
      p.live[a] = {n, s};
    }
  }
  if (f) fclose(f);
  return p;
}

// The trace's device allocations are exactly the program's live blocks, each with a stack
// through the call site that made it.
void expect_matches(const trace& t, const program& p) {
  std::map<std::uintptr_t, const live_allocation*> got;
  for (const auto& a : t.live)
    if (a.kind == alloc_kind::device) got[a.address] = &a;
  ASSERT_EQ(got.size(), p.live.size());
  for (const auto& [address, want] : p.live) {
    auto it = got.find(address);
    ASSERT_NE(it, got.end()) << "live block " << address << " missing from the trace";
    const live_allocation& a = *it->second;
    EXPECT_EQ(a.requested, want.requested);
    EXPECT_GE(a.rounded, want.requested);
    const auto* ips = t.stack(a.stack_id);
    ASSERT_NE(ips, nullptr) << "no stack for " << address;
    const std::uintptr_t site = p.sites.at(want.site);
    bool through_site = false;
    for (auto ip : *ips)
      through_site = through_site || (ip > site && ip < site + 128);
    EXPECT_TRUE(through_site) << "stack of " << address << " does not pass site " << want.site;
    const module* m = t.module_of(site);
    ASSERT_NE(m, nullptr);
    EXPECT_NE(m->path.find("trace_e2e_program"), std::string::npos) << m->path;
  }
  EXPECT_EQ(t.losses.live_overflow, 0u);
}

class shm_e2e : public ::testing::Test {
protected:
  void SetUp() override {
    const std::string b = build_dir();
    for (const char* need :
         {"/lib/libgmem.so", "/tests/fake_cuda/libcuda.so.1", "/tests/trace_e2e_program"})
      if (!exists(b + need)) GTEST_FAIL() << b + need << " not built (make test builds it)";
  }
  void TearDown() override {
    if (name_.empty()) return;
    std::string error;
    EXPECT_TRUE(remove_shm(name_, &error)) << error;
  }
  void remember(const trace& t) { name_ = t.info.object; }
  std::string name_;
};

TEST_F(shm_e2e, live_allocations_while_running_and_after_sigkill) {
  program p = start("spin", 60);
  ASSERT_GT(p.pid, 0);
  ASSERT_EQ(p.live.size(), 40u);
  const read_result running = open_pid(static_cast<std::uint32_t>(p.pid));
  ASSERT_TRUE(running) << running.error.to_string();
  remember(running.value);
  EXPECT_EQ(running.value.info.state, trace_state::running);
  expect_matches(running.value, p);
  kill(p.pid, SIGKILL);
  int status = 0;
  waitpid(p.pid, &status, 0);
  const read_result dead = open_pid(static_cast<std::uint32_t>(p.pid));
  ASSERT_TRUE(dead) << dead.error.to_string();
  EXPECT_EQ(dead.value.info.state, trace_state::crashed);
  expect_matches(dead.value, p);
}

TEST_F(shm_e2e, live_allocations_after_exit) {
  program p = start("exit", 30);
  ASSERT_GT(p.pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(p.pid, &status, 0), p.pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  const read_result r = open_pid(static_cast<std::uint32_t>(p.pid));
  ASSERT_TRUE(r) << r.error.to_string();
  remember(r.value);
  EXPECT_EQ(r.value.info.state, trace_state::exited);
  expect_matches(r.value, p);
  EXPECT_FALSE(r.value.segments.empty());
  EXPECT_FALSE(r.value.devices.empty()); // the final sample of the pools' counters
}

} // namespace
} // namespace gmem::trace
