// Session 29: the latency of each pair of trace_cost's pattern on the pool alone (arena,
// barriers, instant fences; no hooks, no driver), stream-less ("n") or on one stream ("s",
// through the thread's cache): mean and percentiles of 2,000,000 pairs timed one by one (the
// clock pair included). Built against the pool library of a build tree:
//   g++ -O2 -std=c++20 -I. pair_latency.cpp build/lib/libgmem_pool.a -pthread -o pair_latency
//   ./pair_latency n | ./pair_latency s
#include "pool/pool.h"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>
using namespace gmem;
struct up_t : upstream {
  std::uintptr_t next = std::uintptr_t{1} << 40;
  std::uintptr_t map(std::size_t b) noexcept override {
    auto a = next;
    next += b;
    return a;
  }
  void unmap(std::uintptr_t, std::size_t) noexcept override {}
  std::size_t arena_page() const noexcept override { return 16u << 20; }
  std::uintptr_t top = std::uintptr_t{1} << 46;
  std::uintptr_t extend(std::uintptr_t at, std::size_t b) noexcept override {
    auto base = at != 0 ? at : top;
    top = std::max(top, base + b);
    return base;
  }
};
struct fe_t : fences {
  bool synchronize() noexcept override { return true; }
  bool barrier() noexcept override { return true; }
  event_handle record(stream_handle) noexcept override { return 1; }
  bool query(event_handle) noexcept override { return true; }
  bool wait(stream_handle, event_handle) noexcept override { return true; }
  void release(event_handle) noexcept override {}
};
int main(int argc, char** argv) {
  const stream_handle s = argc > 1 && argv[1][0] == 's' ? 7 : k_no_stream;
  up_t up;
  fe_t fe;
  pool_options o;
  o.arena = true;
  o.barriers = true;
  pool p(up, fe, o);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> lg(8.0, 22.0);
  std::vector<std::uintptr_t> live(8);
  for (auto& a : live)
    a = p.allocate(std::size_t(std::exp2(lg(rng))), s).address;
  const int n = 2000000;
  std::vector<std::size_t> sizes(n);
  for (auto& z : sizes)
    z = std::size_t(std::exp2(lg(rng)));
  std::vector<double> ns(n);
  for (int i = 0; i < n; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = p.allocate(sizes[i], s);
    p.deallocate(live[i % 8], s);
    auto t1 = std::chrono::steady_clock::now();
    live[i % 8] = r.address;
    ns[i] = std::chrono::duration<double, std::nano>(t1 - t0).count();
  }
  double m = 0;
  for (double v : ns)
    m += v;
  m /= n;
  std::sort(ns.begin(), ns.end());
  std::printf("%s mean %.1f p50 %.0f p90 %.0f p95 %.0f p99 %.0f p99.9 %.0f\n",
              s == k_no_stream ? "streamless" : "stream", m, ns[n / 2], ns[n * 9 / 10],
              ns[n * 95 / 100], ns[n * 99 / 100], ns[n * 999 / 1000]);
}
