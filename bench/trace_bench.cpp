// Cost of trace recording, measured the way a traced program pays it: through the recorder's
// entry points (interpose/trace_hooks.h, what libgmem.so calls), into a new /dev/shm object
// per run (so its growth and first touches are paid, as in a real run), over addresses that
// keep changing as a long run's do, with every pair timed so the mean and p99 show page
// faults and rehashes, not only the median. No GPU.
//
//   make build/bench/trace_bench && build/bench/trace_bench [--pairs N] [--first-lap N]
//       [--live N] [--runs N] [--between BYTES] [--threads N]
//       [--only off|stamps|offdeep|nostacks|shallow|deep|offsites|sites]
//
// Each configuration runs in its own child process (a fresh trace), `runs` times: off (the
// loop without recording: the baseline), off with two time stamps per pair and nothing else
// (what any recorder that stamps every event pays: the floor under the targets below), off from 40
// frames deep (the deep row's baseline: the calls and returns alone), stacks off
// (GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0), stacks at the default depth from a shallow and from a
// 40-frame-deep call site, and from 8 call sites 20 frames deep taken in turn (against the same
// calls without recording); --only runs one of them. The figures are of the pairs after a first lap
// that fills the event ring (a long run's steady state); the first lap's mean, which includes
// growing the trace to its full ring, is the last column. Targets: <= 60 ns mean per
// pair without stacks; <= 400 ns with stacks (measured on the GPU host in a Python process, see
// bench/README.md). --between BYTES (default 0) writes one word in every 64-byte line of that many
// bytes between two pairs, untimed: a program's own work (an interpreter's) that pushes the
// recorder's lines out of the core's caches, as a Python process with torch does between its
// allocations (e.g. --between 1M: on the H200 that is where the recorder's cache misses show).
// --threads N (default 1) runs the loop on N threads at once, each with its own addresses, into one
// trace: the figures are over all their pairs (threads that record at once share the live table's
// shards; each writes its own event lane).
#include <algorithm>
#include <array>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <utility>
#include <vector>
#include <x86intrin.h>

#include "common/units.h"
#include "interpose/trace_hooks.h"
#include "profiler/format/trace_clock.h"
#include "profiler/reader/trace_save.h"
#include "profiler/recorder/recorder.h"

using namespace gmem::trace;

namespace {

struct settings {
  std::size_t pairs = 200000;     // timed, after the first lap
  std::size_t first_lap = 300000; // pairs that fill the default event ring (524288 events)
  std::size_t live = 8;           // blocks live besides the one of each pair
  int runs = 5;
  std::size_t between = 0; // bytes written between two pairs (untimed), one word per line
  std::string only;        // "" = every row; else the key of the one row to run
  unsigned threads = 1;    // loops recording at once into one trace
};

struct summary {
  double mean_ns = 0, p50_ns = 0, p99_ns = 0, max_ns = 0;
  double first_lap_mean_ns = 0; // the trace growing to its full event ring
  std::uint64_t trace_bytes = 0;
};

double monotonic_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

double ticks_per_ns() {
  const double a = monotonic_ns();
  const std::uint64_t t0 = __rdtsc();
  double b = a;
  while (b - a < 20e6)
    b = monotonic_ns();
  return static_cast<double>(__rdtsc() - t0) / (b - a);
}

// An address stream like a pool's: log-uniform sizes 256 B - 4 MiB placed in a growing arena,
// so a long run keeps bringing new addresses (and the live table keeps meeting new keys).
// Thread t of --threads takes its addresses from its own 64 GiB range.
struct address_stream {
  explicit address_stream(unsigned t = 0)
      : rng(42 + t), start(0x7f0000000000 - (std::uintptr_t{t} << 37)), next(start) {}
  std::mt19937_64 rng;
  std::uintptr_t start, next;
  std::pair<std::uintptr_t, std::size_t> take() {
    const double lg = std::uniform_real_distribution<double>(8.0, 22.0)(rng);
    const auto size = static_cast<std::size_t>(std::exp2(lg));
    const std::uintptr_t a = next;
    next += (size + 511) & ~std::size_t{511};
    if (next > start + (std::uintptr_t{64} << 30)) next = start; // wrap 64 GiB
    return {a, size};
  }
};

// A call site 40 frames deep; at the bottom, the capture when `capture`. The baseline row for
// it makes the same calls without capturing: returning through 40 frames costs mispredicted
// returns that the program pays with or without gmem.
template <int N> __attribute__((noinline)) std::uint32_t deep_capture(bool capture) {
  if constexpr (N == 0) {
    return capture ? capture_stack() : 0;
  } else {
    const std::uint32_t id = deep_capture<N - 1>(capture);
    asm volatile("" ::: "memory"); // a real frame at every level
    return id;
  }
}

// Call sites as a real program has them: k_sites paths of k_site_depth frames each, every
// frame a function of its own (the volatile counter keeps the compiler from folding the paths
// into one), taken in turn. A training step allocates from tens of such sites, so a walk meets
// well over a hundred return addresses, not one path's.
constexpr int k_sites = 8;
constexpr int k_site_depth = 20;
volatile std::uint32_t g_site_visits[k_sites * (k_site_depth + 1)];
template <int S, int N> __attribute__((noinline)) std::uint32_t site_capture(bool capture) {
  g_site_visits[S * (k_site_depth + 1) + N] = g_site_visits[S * (k_site_depth + 1) + N] + 1;
  if constexpr (N == 0) {
    return capture ? capture_stack() : 0;
  } else {
    const std::uint32_t id = site_capture<S, N - 1>(capture);
    asm volatile("" ::: "memory");
    return id;
  }
}
template <int... S> constexpr auto site_table(std::integer_sequence<int, S...>) {
  return std::array<std::uint32_t (*)(bool), sizeof...(S)>{&site_capture<S, k_site_depth>...};
}
constexpr auto k_site_calls = site_table(std::make_integer_sequence<int, k_sites>{});

enum class mode {
  off,
  stamps,
  off_deep,
  stacks_off,
  stacks_shallow,
  stacks_deep,
  off_sites,
  stacks_sites
};

// One thread's loop: the ticks of each pair, the first lap's first.
std::vector<std::uint32_t> loop(mode m, const settings& s, unsigned thread) {
  address_stream addresses(thread);
  std::vector<std::pair<std::uintptr_t, std::size_t>> live;
  const bool record =
      m != mode::off && m != mode::stamps && m != mode::off_deep && m != mode::off_sites;
  std::uint64_t stamps = 0;
  for (std::size_t i = 0; i < s.live; ++i) {
    live.push_back(addresses.take());
    if (record)
      alloc(live.back().first, live.back().second, live.back().second, 0, 0, alloc_kind::device, 0);
  }
  std::vector<std::uint32_t> samples(s.first_lap + s.pairs);
  std::vector<std::uint64_t> scratch(s.between / sizeof(std::uint64_t));
  std::size_t victim = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const auto [a, size] = addresses.take();
    const std::uint64_t t0 = __rdtsc();
    if (record) {
      // Stacks off too: the shim's allocation hook calls capture_stack() whatever the depth.
      const std::uint32_t stack = m == mode::stacks_deep    ? deep_capture<40>(true)
                                  : m == mode::stacks_sites ? k_site_calls[i % k_sites](true)
                                                            : capture_stack();
      alloc(a, size, (size + 511) & ~std::size_t{511}, 0, 0, alloc_kind::device, stack);
      free(live[victim].first, 0, 0, alloc_kind::device);
    } else if (m == mode::stamps) {
      stamps += now_ticks(); // the two events' time stamps alone, as the recorder reads them
      asm volatile("" : "+r"(stamps));
      stamps += now_ticks();
    } else if (m == mode::off_deep) {
      (void)deep_capture<40>(false);
    } else if (m == mode::off_sites) {
      (void)k_site_calls[i % k_sites](false);
    }
    asm volatile("" ::: "memory");
    const std::uint64_t t1 = __rdtsc();
    live[victim] = {a, size};
    victim = (victim + 1) % live.size();
    samples[i] = static_cast<std::uint32_t>(std::min<std::uint64_t>(t1 - t0, 0xffffffffu));
    for (std::size_t j = 0; j < scratch.size(); j += 64 / sizeof(std::uint64_t))
      scratch[j] += i;
    asm volatile("" : : "r"(scratch.data()) : "memory");
  }
  asm volatile("" : : "r"(stamps));
  return samples;
}

summary measure(mode m, const settings& s, double tpn) {
  std::vector<std::vector<std::uint32_t>> per(s.threads);
  {
    std::vector<std::thread> threads;
    for (unsigned t = 1; t < s.threads; ++t)
      threads.emplace_back([&, t] { per[t] = loop(m, s, t); });
    per[0] = loop(m, s, 0);
    for (auto& t : threads)
      t.join();
  }
  summary r;
  double first = 0;
  std::vector<std::uint32_t> samples;
  for (auto& one : per) {
    for (std::size_t i = 0; i < s.first_lap; ++i)
      first += one[i];
    samples.insert(samples.end(), one.begin() + static_cast<std::ptrdiff_t>(s.first_lap),
                   one.end());
  }
  r.first_lap_mean_ns =
      s.first_lap ? first / static_cast<double>(s.first_lap * s.threads) / tpn : 0;
  double sum = 0;
  for (auto v : samples)
    sum += v;
  std::sort(samples.begin(), samples.end());
  r.mean_ns = sum / static_cast<double>(samples.size()) / tpn;
  r.p50_ns = samples[samples.size() / 2] / tpn;
  r.p99_ns = samples[samples.size() * 99 / 100] / tpn;
  r.max_ns = static_cast<double>(samples.back()) / tpn;
  if (const trace_writer* w = recorder_writer_if_open()) r.trace_bytes = w->total_bytes();
  return r;
}

// One fresh process per run: its own recorder, its own /dev/shm object, removed after.
summary run_child(mode m, const settings& s, double tpn) {
  int fds[2];
  if (pipe(fds) != 0) std::exit(1);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    setenv("GMEM_STACK_DEPTH", m == mode::stacks_off ? "0" : "16", 1);
    if (m == mode::stacks_off) setenv("GMEM_PYTHON_DEPTH", "0", 1); // no stacks of either kind
    setenv("GMEM_TRACE_KEEP", "none", 1);
    init();
    const summary r = measure(m, s, tpn);
    const std::string name = recorder_object_name();
    if (!name.empty()) remove_shm(name, nullptr);
    if (write(fds[1], &r, sizeof r) != sizeof r) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  summary r;
  const bool got = read(fds[0], &r, sizeof r) == sizeof r;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!got || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "trace_bench: a run failed\n");
    std::exit(1);
  }
  return r;
}

} // namespace

constexpr const char* k_usage =
    "usage: trace_bench [--pairs N] [--first-lap N] [--live N] [--runs N] [--between BYTES] "
    "[--threads N] [--only off|stamps|offdeep|nostacks|shallow|deep|offsites|sites]\n";

int main(int argc, char** argv) {
  settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const auto v = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--only") {
      s.only = argv[i + 1];
    } else if (flag == "--pairs" && v > 0) {
      s.pairs = v;
    } else if (flag == "--first-lap") {
      s.first_lap = v;
    } else if (flag == "--live" && v > 0) {
      s.live = v;
    } else if (flag == "--threads" && v > 0 && v <= 256) {
      s.threads = static_cast<unsigned>(v);
    } else if (flag == "--runs" && v > 0) {
      s.runs = static_cast<int>(v);
    } else if (flag == "--between") {
      const auto bytes = gmem::parse_size(argv[i + 1]);
      if (!bytes || *bytes > (std::uint64_t{1} << 30)) {
        std::fprintf(stderr,
                     "trace_bench: --between takes a size up to 1G (256K, 4M...), not "
                     "'%s'\n",
                     argv[i + 1]);
        return 2;
      }
      s.between = static_cast<std::size_t>(*bytes);
    } else {
      std::fprintf(stderr, "%s", k_usage);
      return 2;
    }
  }
  if (argc % 2 == 0) {
    std::fprintf(stderr, "%s", k_usage);
    return 2;
  }
  struct row {
    const char* name;
    const char* key;
    mode m;
  };
  const row rows[] = {{"off (baseline)", "off", mode::off},
                      {"off, two stamps", "stamps", mode::stamps},
                      {"off, 40 deep (baseline)", "offdeep", mode::off_deep},
                      {"on, stacks off", "nostacks", mode::stacks_off},
                      {"on, stacks 16 (shallow)", "shallow", mode::stacks_shallow},
                      {"on, stacks 16 (40 deep)", "deep", mode::stacks_deep},
                      {"off, 8 sites (baseline)", "offsites", mode::off_sites},
                      {"on, stacks 16 (8 sites)", "sites", mode::stacks_sites}};
  if (!s.only.empty() && std::none_of(std::begin(rows), std::end(rows),
                                      [&](const row& r) { return s.only == r.key; })) {
    std::fprintf(
        stderr,
        "trace_bench: --only takes off, stamps, offdeep, nostacks, shallow, deep, offsites "
        "or sites, not '%s'\n",
        s.only.c_str());
    return 2;
  }
  const double tpn = ticks_per_ns();
  std::printf("trace_bench: %zu alloc+free pairs per run and thread, %u threads, %zu live, %d "
              "runs per row, %zu bytes written between pairs, %.2f ticks/ns; each run a fresh "
              "process and trace\n",
              s.pairs, s.threads, s.live, s.runs, s.between, tpn);
  std::printf("%-24s %10s %10s %10s %10s %12s %12s\n", "recording", "mean ns", "p50 ns", "p99 ns",
              "max ns", "trace bytes", "added ns");
  double baseline = 0, deep_baseline = 0, sites_baseline = 0; // "added ns": over its baseline
  for (const row& r : rows) {
    if (!s.only.empty() && s.only != r.key) continue;
    summary total;
    for (int k = 0; k < s.runs; ++k) {
      const summary one = run_child(r.m, s, tpn);
      total.mean_ns += one.mean_ns / s.runs;
      total.first_lap_mean_ns += one.first_lap_mean_ns / s.runs;
      total.p50_ns += one.p50_ns / s.runs;
      total.p99_ns += one.p99_ns / s.runs;
      total.max_ns = std::max(total.max_ns, one.max_ns);
      total.trace_bytes = std::max(total.trace_bytes, one.trace_bytes);
    }
    if (r.m == mode::off) baseline = total.mean_ns;
    if (r.m == mode::off_deep) deep_baseline = total.mean_ns;
    if (r.m == mode::off_sites) sites_baseline = total.mean_ns;
    const double base = r.m == mode::stacks_deep    ? deep_baseline
                        : r.m == mode::stacks_sites ? sites_baseline
                                                    : baseline;
    const bool is_baseline = r.m == mode::off_deep || r.m == mode::off_sites;
    std::printf("%-24s %10.1f %10.1f %10.1f %10.0f %12" PRIu64 " %12.1f %14.1f\n", r.name,
                total.mean_ns, total.p50_ns, total.p99_ns, total.max_ns, total.trace_bytes,
                is_baseline ? 0.0 : total.mean_ns - base, total.first_lap_mean_ns);
  }
  return 0;
}
