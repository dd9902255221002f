// What the primitives of trace recording cost on this host: reading the clock (rdtsc,
// clock_gettime), an uncontended atomic read-modify-write on private memory and on a
// MAP_SHARED /dev/shm page (where the trace lives), and a store into a fresh cache line of
// such a page. The writer's cost per event is roughly a sum of these, so a host where one of
// them is slow (an intercepted rdtsc under some hypervisors, for instance) explains a recording
// cost that the build machine does not show. No GPU.
//
//   make build/bench/host_costs && build/bench/host_costs [--iters N]
//
// Prints one line per primitive: mean and p99 ns over batches of 64 operations, and the
// clock source the kernel uses.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <string>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <vector>
#include <x86intrin.h>

namespace {

constexpr int k_batch = 64;

double now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

// Runs `op` k_batch times per sample, `samples` times; prints mean and p99 per operation.
template <typename F> void measure(const char* name, long samples, F op) {
  std::vector<double> per_op(static_cast<std::size_t>(samples));
  for (int i = 0; i < 1000; ++i)
    op(i); // warm up
  for (long s = 0; s < samples; ++s) {
    const double t0 = now_ns();
    for (int i = 0; i < k_batch; ++i)
      op(static_cast<int>(s * k_batch + i));
    per_op[static_cast<std::size_t>(s)] = (now_ns() - t0) / k_batch;
  }
  double sum = 0;
  for (double v : per_op)
    sum += v;
  std::sort(per_op.begin(), per_op.end());
  std::printf("%-44s mean %7.1f ns   p99 %7.1f ns\n", name, sum / static_cast<double>(samples),
              per_op[static_cast<std::size_t>(static_cast<double>(samples) * 0.99)]);
}

std::string clock_source() {
  std::ifstream f("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  std::string s;
  std::getline(f, s);
  return s.empty() ? "unknown" : s;
}

} // namespace

int main(int argc, char** argv) {
  long samples = 20000;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      samples = std::max(100L, std::atol(argv[++i]) / k_batch);
    } else {
      std::fprintf(stderr, "usage: host_costs [--iters N]\n");
      return 2;
    }
  }
  std::printf("clock source: %s, cpus online: %ld\n", clock_source().c_str(),
              sysconf(_SC_NPROCESSORS_ONLN));

  volatile std::uint64_t sink = 0;
  measure("empty loop", samples, [&](int i) { sink = sink + static_cast<std::uint64_t>(i); });
  measure("rdtsc", samples, [&](int) { sink = sink + __rdtsc(); });
  measure("rdtscp", samples, [&](int) {
    unsigned aux = 0;
    sink = sink + __rdtscp(&aux);
  });
  measure("clock_gettime(CLOCK_MONOTONIC)", samples, [&](int) {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC, &t);
    sink = sink + static_cast<std::uint64_t>(t.tv_nsec);
  });
  measure("clock_gettime(CLOCK_MONOTONIC_COARSE)", samples, [&](int) {
    timespec t{};
    clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
    sink = sink + static_cast<std::uint64_t>(t.tv_nsec);
  });

  std::atomic<std::uint64_t> private_word{0};
  measure("fetch_add, private memory", samples,
          [&](int) { private_word.fetch_add(1, std::memory_order_acq_rel); });

  const std::string name = "/gmem-host-costs." + std::to_string(getpid());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) {
    std::perror("shm_open");
    return 1;
  }
  shm_unlink(name.c_str());
  constexpr std::size_t k_bytes = std::size_t{64} << 20;
  if (ftruncate(fd, static_cast<off_t>(k_bytes)) != 0) {
    std::perror("ftruncate");
    return 1;
  }
  auto* shared = static_cast<std::uint64_t*>(
      mmap(nullptr, k_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0));
  if (shared == MAP_FAILED) {
    std::perror("mmap");
    return 1;
  }
  auto* word = reinterpret_cast<std::atomic<std::uint64_t>*>(shared);
  measure("fetch_add, /dev/shm page", samples,
          [&](int) { word->fetch_add(1, std::memory_order_acq_rel); });
  measure("compare_exchange, /dev/shm page", samples, [&](int i) {
    std::uint64_t expected = word->load(std::memory_order_relaxed);
    word->compare_exchange_strong(expected, static_cast<std::uint64_t>(i));
  });
  const std::size_t lines = k_bytes / 64;
  measure("8-word record, next line of a 64 MiB ring", samples, [&](int i) {
    std::uint64_t* rec = shared + (static_cast<std::size_t>(i) % lines) * 8;
    for (int w = 0; w < 8; ++w)
      reinterpret_cast<std::atomic<std::uint64_t>*>(rec + w)->store(static_cast<std::uint64_t>(i),
                                                                    std::memory_order_release);
  });
  measure("8-word record, next line of a 1 MiB ring", samples, [&](int i) {
    std::uint64_t* rec = shared + (static_cast<std::size_t>(i) % (lines / 64)) * 8;
    for (int w = 0; w < 8; ++w)
      reinterpret_cast<std::atomic<std::uint64_t>*>(rec + w)->store(static_cast<std::uint64_t>(i),
                                                                    std::memory_order_release);
  });
  measure("8-word record, 64 MiB ring, streaming stores", samples, [&](int i) {
    auto* rec = reinterpret_cast<long long*>(shared + (static_cast<std::size_t>(i) % lines) * 8);
    for (int w = 1; w < 8; ++w)
      _mm_stream_si64(rec + w, i);
    _mm_sfence();
    _mm_stream_si64(rec, i);
  });
  std::printf("(sink %llu)\n", static_cast<unsigned long long>(sink));
  return 0;
}
