#include "interpose/oom_notice.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/units.h"
#include "interpose/real_driver.h"
#include "interpose/shim_state.h"
#include "profiler/reader/trace_reader.h"
#include "profiler/recorder/recorder.h"
#include "profiler/recorder/trace_writer.h"

namespace gmem::shim {
namespace {

std::atomic<std::uint64_t> g_last_report_s{0}; // monotonic seconds + 1 of the last report
std::atomic<std::uint64_t> g_left_out{0};      // failures since then without a report

std::uint64_t monotonic_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec);
}

bool in_shim(const Dl_info& info) {
  if (info.dli_fname == nullptr) return false;
  const std::string f = info.dli_fname;
  const std::string base = f.substr(f.rfind('/') + 1);
  return base.rfind("libgmem", 0) == 0 || base.rfind("libunwind", 0) == 0;
}

// "leak_weights()+0x1c (leak_sites)" for one return address, from the dynamic symbol table
// (no debug info in-process; `gmem oom` prints file:line).
std::string frame_name(std::uintptr_t ip) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(ip - 1), &info) == 0) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%lx", static_cast<unsigned long>(ip));
    return b;
  }
  const std::string file = info.dli_fname != nullptr ? info.dli_fname : "?";
  const std::string module = file.substr(file.rfind('/') + 1);
  char off[32];
  if (info.dli_sname == nullptr) {
    std::snprintf(
        off, sizeof off, "+0x%lx",
        static_cast<unsigned long>(ip - reinterpret_cast<std::uintptr_t>(info.dli_fbase)));
    return module + off;
  }
  int status = 0;
  char* d = abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status);
  std::string name = status == 0 && d != nullptr ? d : info.dli_sname;
  std::free(d);
  std::snprintf(off, sizeof off, "+0x%lx",
                static_cast<unsigned long>(ip - reinterpret_cast<std::uintptr_t>(info.dli_saddr)));
  return name + off + " (" + module + ")";
}

// The first two frames outside the shim: "helper()+0x1c (app) < caller()+0x40 (app)".
std::string site_text(const std::vector<std::uintptr_t>* ips) {
  if (ips == nullptr || ips->empty()) return "(no stack recorded)";
  std::string s;
  int shown = 0;
  for (const auto ip : *ips) {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(ip - 1), &info) != 0 && in_shim(info)) continue;
    s += (shown == 0 ? "" : "  <  ") + frame_name(ip);
    if (++shown == 2) break;
  }
  return shown == 0 ? frame_name(ips->front()) : s;
}

// The top holders on `device` from this process's own trace: the live table decoded in place
// (the reader tolerates the writers running on other threads).
std::string holders(int device) {
  gmem::trace::trace_writer* w = gmem::trace::recorder_writer_if_open();
  if (w == nullptr) return "  top holders: unknown (no trace: GMEM_TRACE=0)\n";
  const auto* base = static_cast<const std::byte*>(w->data());
  const auto r = gmem::trace::decode(std::span(base, w->total_bytes()),
                                     {.events = false, .samples = false, .live = true});
  if (!r) return "  top holders: unknown (the trace could not be read)\n";
  struct site {
    std::uint64_t bytes = 0, count = 0;
  };
  std::unordered_map<std::uint32_t, site> by_stack;
  std::uint64_t total = 0;
  for (const auto& a : r.value.live) {
    if (a.device != device) continue;
    site& s = by_stack[a.stack_id];
    s.bytes += a.requested;
    ++s.count;
    total += a.requested;
  }
  // Stacks that print the same are one site.
  std::unordered_map<std::string, site> by_text;
  for (const auto& [id, s] : by_stack) {
    site& t = by_text[site_text(r.value.stack(id))];
    t.bytes += s.bytes;
    t.count += s.count;
  }
  std::vector<std::pair<std::string, site>> top(by_text.begin(), by_text.end());
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) {
    return a.second.bytes != b.second.bytes ? a.second.bytes > b.second.bytes : a.first < b.first;
  });
  if (top.size() > 5) top.resize(5);
  std::string out = "gmem:   top holders on this device (" + format_bytes(total) + " live):\n";
  for (const auto& [text, s] : top)
    out += "gmem:     " + format_bytes(s.bytes) + " in " + std::to_string(s.count) +
           (s.count == 1 ? " allocation  " : " allocations  ") + text + "\n";
  return out;
}

} // namespace

void print_oom_notice(int device, std::size_t requested, const pool_stats& s) noexcept {
  if (!shim_options().oom_report) return;
  const std::uint64_t now = monotonic_s() + 1;
  std::uint64_t last = g_last_report_s.load(std::memory_order_relaxed);
  if ((last != 0 && now - last < k_oom_notice_interval_s) ||
      !g_last_report_s.compare_exchange_strong(last, now)) {
    g_left_out.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  try {
    std::string out =
        "gmem: OUT OF MEMORY (pid " + std::to_string(getpid()) + "): " + format_bytes(requested) +
        " requested on " +
        (device < 0 ? std::string("the host pool") : "device " + std::to_string(device));
    if (const std::uint64_t n = g_left_out.exchange(0); n != 0)
      out += " (" + std::to_string(n) + " more since the last report)";
    out += "\n";
    std::size_t free_b = 0, total_b = 0;
    const real_driver* d = driver_if_resolved();
    if (device >= 0 && d != nullptr && d->cuMemGetInfo_v2 != nullptr &&
        d->cuMemGetInfo_v2(&free_b, &total_b) == CUDA_SUCCESS)
      out += "gmem:   device free " + format_bytes(free_b) + " of " + format_bytes(total_b) + ", ";
    else
      out += "gmem:   ";
    out += "pool limit " +
           (s.limit_bytes == 0 ? std::string("none") : format_bytes(s.limit_bytes)) + "\n";
    char frag[16];
    std::snprintf(frag, sizeof frag, "%.2f", s.fragmentation());
    out += "gmem:   pool: reserved " + format_bytes(s.reserved_bytes) + ", live " +
           format_bytes(s.live_bytes) + ", cached free " + format_bytes(s.free_bytes) +
           ", pending " + format_bytes(s.pending_bytes) + "; fragmentation " + frag +
           ", largest free block " + format_bytes(s.largest_free_block) + "\n";
    out += holders(device);
    out += "gmem:   every OOM with its snapshot: gmem oom " + std::to_string(getpid()) +
           " (GMEM_OOM_REPORT=0 turns this report off)\n";
    std::fwrite(out.data(), 1, out.size(), stderr);
    std::fflush(stderr);
  } catch (...) {
    // No memory for the report either: the allocation's error code still tells the program.
  }
}

} // namespace gmem::shim
