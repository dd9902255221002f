#include "tools/analysis/leak_report.h"

#include <algorithm>
#include <cstdio>
#include <dlfcn.h>
#include <link.h>

#include <gtest/gtest.h>

#include "profiler/format/module_map.h"
#include "tests/tools/sample_trace.h"
#include "tools/analysis/trace_facts.h"

namespace gmem::tools {
namespace {

using testing::k_ms;
using testing::sample_trace;

TEST(leak_report, groups_by_site_and_sorts_by_bytes) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  const leak_report r = build_leak_report(t, symbols, {});
  ASSERT_EQ(r.sites.size(), 3u);
  EXPECT_TRUE(r.is_valid());
  leak_report unsorted = r;
  std::swap(unsorted.sites[0], unsorted.sites[2]);
  EXPECT_FALSE(unsorted.is_valid());
  EXPECT_EQ(r.sites[0].bytes, 8u << 20); // stack 2
  EXPECT_EQ(r.sites[0].count, 1u);
  EXPECT_EQ(r.sites[1].bytes, (1u << 20) - 512); // stack 3
  EXPECT_EQ(r.sites[1].oldest_age_ns, 2000 * k_ms);
  EXPECT_EQ(r.sites[2].bytes, 4u * (250u << 10)); // stack 1
  EXPECT_EQ(r.sites[2].rounded_bytes, 4u * (256u << 10));
  EXPECT_EQ(r.sites[2].count, 4u);
  EXPECT_EQ(r.sites[2].oldest_age_ns, 4900 * k_ms); // exited at 5 s, first at 100 ms
  EXPECT_EQ(r.sites[2].youngest_age_ns, 4897 * k_ms);
  EXPECT_EQ(r.total_count, 6u);
  EXPECT_EQ(r.all_count, 6u);
  EXPECT_FALSE(r.process_alive);
  // Frames of an unreadable module are kept as module+offset.
  ASSERT_EQ(r.sites[2].frames.size(), 2u);
  EXPECT_EQ(r.sites[2].frames[0].name(), "libmodel.so+0x1010");
  EXPECT_EQ(r.sites[2].frames[1].name(), "libmodel.so+0x2020");
  EXPECT_EQ(r.sites[0].kinds, std::vector<std::string>{"async"});
}

TEST(leak_report, filters) {
  const auto t = sample_trace();
  symbolizer symbols(module_ranges(t));
  leak_filter f;
  f.min_bytes = 1u << 20;
  auto r = build_leak_report(t, symbols, f);
  EXPECT_TRUE(r.is_valid());
  EXPECT_EQ(r.sites.size(), 1u); // only the 8 MiB site; the 1000 KiB and 1 MiB-512 ones are below
  EXPECT_EQ(r.hidden_sites, 2u);
  f = {};
  f.min_age_ns = 3000 * k_ms; // younger than 3 s: the stack-3 allocation (at 3.0 s, age 2 s)
  r = build_leak_report(t, symbols, f);
  EXPECT_EQ(r.sites.size(), 2u);
  f = {};
  f.top = 1;
  r = build_leak_report(t, symbols, f);
  ASSERT_EQ(r.sites.size(), 1u);
  EXPECT_EQ(r.sites[0].bytes, 8u << 20);
  EXPECT_EQ(r.hidden_sites, 2u);
  EXPECT_EQ(r.all_bytes, (8u << 20) + 4u * (250u << 10) + (1u << 20) - 512);
}

TEST(leak_report, stacks_that_print_alike_are_one_site) {
  auto t = sample_trace();
  t.stacks[4] = t.stacks[3]; // same ips under another id
  t.live.back().stack_id = 4;
  t.live.push_back(t.live.back());
  t.live.back().address += 1 << 20;
  t.live.back().stack_id = 3;
  symbolizer symbols(module_ranges(t));
  const auto r = build_leak_report(t, symbols, {});
  ASSERT_EQ(r.sites.size(), 3u);
  EXPECT_EQ(r.sites[1].count, 2u); // stacks 3 and 4
  EXPECT_EQ(r.sites[2].count, 4u);
}

// Real symbolization: stacks pointing at functions of this test binary resolve to their
// demangled names and this file's lines.
__attribute__((noinline)) void leak_site_alpha(int) {
  asm volatile("");
}
__attribute__((noinline)) void leak_site_beta() {
  asm volatile("");
}

int find_self(dl_phdr_info* info, std::size_t, void* out) {
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') { // the main program
    auto* m = static_cast<module_range*>(out);
    std::uint64_t lo = ~0ull, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; ++i) {
      const auto& ph = info->dlpi_phdr[i];
      if (ph.p_type != PT_LOAD) continue;
      lo = std::min<std::uint64_t>(lo, info->dlpi_addr + ph.p_vaddr);
      hi = std::max<std::uint64_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
    }
    m->base = info->dlpi_addr;
    m->start = lo;
    m->size = hi - lo;
    return 1;
  }
  return 0;
}

// The build id of the loaded object that starts at `start`, in lower-case hex.
std::string own_build_id(std::uint64_t start) {
  for (const auto& m : gmem::trace::scan_modules()) {
    if (m.start != start) continue;
    std::string hex;
    for (const unsigned char c : m.build_id) {
      char b[3];
      std::snprintf(b, sizeof b, "%02x", c);
      hex += b;
    }
    return hex;
  }
  return {};
}

TEST(symbolizer, resolves_functions_of_a_real_module) {
  module_range self;
  dl_iterate_phdr(find_self, &self);
  char path[4096];
  const auto n = readlink("/proc/self/exe", path, sizeof path - 1);
  ASSERT_GT(n, 0);
  self.path.assign(path, static_cast<std::size_t>(n));
  self.build_id = own_build_id(self.start);
  ASSERT_FALSE(self.build_id.empty()) << "tools_test was linked without a build id";
  symbolizer symbols({self});
  // +1: resolve() looks up ip - 1 (return addresses); the function's first byte + 1 is inside it.
  const auto a = reinterpret_cast<std::uintptr_t>(&leak_site_alpha) + 1;
  const auto b = reinterpret_cast<std::uintptr_t>(&leak_site_beta) + 1;
  EXPECT_EQ(symbols.resolve(a).function,
            "gmem::tools::(anonymous namespace)::leak_site_alpha(int)");
  EXPECT_EQ(symbols.resolve(b).function, "gmem::tools::(anonymous namespace)::leak_site_beta()");
  EXPECT_NE(symbols.resolve(a).file.find("leak_report_test.cpp"), std::string::npos);
  EXPECT_GT(symbols.resolve(a).line, 0);
  // A recorded build id that is not the file's: the file was rebuilt, names would lie.
  module_range rebuilt = self;
  rebuilt.build_id = "00112233445566778899aabbccddeeff00112233";
  symbolizer stale({rebuilt});
  EXPECT_TRUE(stale.resolve(a).stale);
  EXPECT_EQ(stale.resolve(a).function, "");
  EXPECT_EQ(stale.resolve(a).name().rfind("tools_test+0x", 0), 0u) << stale.resolve(a).name();
  // An address in no module stays, as "?+0x...".
  EXPECT_EQ(symbols.resolve(0x10).name(), "?+0x10");
}

} // namespace
} // namespace gmem::tools

namespace gmem::tools {
namespace {

TEST(leak_report, host_pool_allocations_are_their_own_kind) {
  auto t = testing::sample_trace();
  t.segments.push_back({0x200000000, 2u << 20, -1, 0});
  t.live.push_back({0x200000000, 4096, 4096, -1, ~std::uintptr_t{0},
                    gmem::trace::alloc_kind::host_pinned, 4242, 10 * testing::k_ms, 7});
  std::sort(t.live.begin(), t.live.end(),
            [](const auto& a, const auto& b) { return a.address < b.address; });
  symbolizer symbols(module_ranges(t));
  const auto r = build_leak_report(t, symbols, {});
  ASSERT_EQ(r.sites.size(), 4u);
  EXPECT_EQ(r.sites[3].devices, std::vector<int>{-1});
  EXPECT_EQ(r.sites[3].kinds, std::vector<std::string>{"host_pinned"});
  EXPECT_TRUE(r.sites[3].frames.empty()); // stack 7 was never stored
}

} // namespace
} // namespace gmem::tools
