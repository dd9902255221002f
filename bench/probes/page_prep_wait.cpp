// What making a trace chunk's pages costs the process's other threads: while a helper thread
// grows a /dev/shm file by chunks (posix_fallocate, then the pages mapped in, as the recorder's
// page helper does), another thread on another CPU maps and unmaps 64 KiB of anonymous memory
// over and over (what glibc's malloc and Python's arenas do) and records how long each took.
// Two ways to map the pages in, and a floor, in interleaved rounds (the order rotated and
// reversed every round):
//   populate  one MADV_POPULATE_WRITE per chunk (holds the process's mmap lock while the kernel
//             faults the whole chunk in)
//   touch     one store per page (each a page fault, taken under the VMA's own lock where the
//             kernel has per-VMA locks for shared faults, 6.7 and later)
//   reserve   posix_fallocate alone, nothing mapped in: the other thread's waits without it
// No GPU.
//
//   make build/bench/page_prep_wait && build/bench/page_prep_wait [--chunk-mib 16] [--chunks 4]
//       [--rounds 8] [--cpus 0,1]
//
// Prints one JSON line per mode and round (the helper's ms per MiB; the other thread's calls,
// their p50, p99.9 and longest wait in us and how many waited over 1 ms), then one summary line
// per mode: median (min-max) over the rounds.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux 5.14
#endif

namespace {

double now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

void pin(int cpu) {
  if (cpu < 0) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

struct result {
  double ms_per_mib = 0, p50_us = 0, p999_us = 0, max_us = 0;
  std::size_t calls = 0, over_1ms = 0;
};

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "page_prep_wait: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

enum class mode { populate, touch, reserve };
constexpr const char* k_modes[] = {"populate", "touch", "reserve"};

result run(mode m, std::size_t chunk, int chunks, int helper_cpu, int other_cpu) {
  const std::string name = "/gmem-page-prep-wait." + std::to_string(getpid());
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) die("shm_open");
  shm_unlink(name.c_str());
  const std::size_t total = chunk * static_cast<std::size_t>(chunks);
  auto* base = static_cast<char*>(
      mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0));
  if (base == MAP_FAILED) die("mmap");

  std::atomic<bool> stop{false};
  std::vector<double> waits;
  waits.reserve(1 << 20);
  std::thread other([&] {
    pin(other_cpu);
    while (!stop.load(std::memory_order_relaxed)) {
      const double t = now_ns();
      void* p = mmap(nullptr, 64 << 10, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) die("mmap (other thread)");
      static_cast<volatile char*>(p)[0] = 1;
      munmap(p, 64 << 10);
      waits.push_back(now_ns() - t);
    }
  });
  pin(helper_cpu);
  usleep(20'000); // the other thread's calls before the growth
  const double t0 = now_ns();
  for (int i = 0; i < chunks; ++i) {
    const off_t at = static_cast<off_t>(chunk) * i;
    if (ftruncate(fd, at + static_cast<off_t>(chunk)) != 0) die("ftruncate");
    if (const int err = posix_fallocate(fd, at, static_cast<off_t>(chunk)); err != 0) {
      errno = err;
      die("posix_fallocate (is /dev/shm full?)");
    }
    char* c = base + at;
    if (m == mode::populate && madvise(c, chunk, MADV_POPULATE_WRITE) != 0)
      die(errno == EINVAL ? "madvise(MADV_POPULATE_WRITE) (Linux 5.14 or later)"
                          : "madvise(MADV_POPULATE_WRITE)");
    if (m == mode::touch)
      for (std::size_t o = 0; o < chunk; o += 4096)
        __atomic_store_n(reinterpret_cast<std::uint64_t*>(c + o), 0, __ATOMIC_RELAXED);
  }
  const double grow_ns = now_ns() - t0;
  usleep(20'000);
  stop.store(true);
  other.join();
  munmap(base, total);
  close(fd);

  std::sort(waits.begin(), waits.end());
  result r;
  r.ms_per_mib = grow_ns / 1e6 / (static_cast<double>(total) / (1 << 20));
  r.calls = waits.size();
  if (!waits.empty()) {
    r.p50_us = waits[waits.size() / 2] / 1e3;
    r.p999_us = waits[waits.size() * 999 / 1000] / 1e3;
    r.max_us = waits.back() / 1e3;
  }
  r.over_1ms =
      static_cast<std::size_t>(waits.end() - std::upper_bound(waits.begin(), waits.end(), 1e6));
  return r;
}

std::string spread(std::vector<double> v, int digits) {
  std::sort(v.begin(), v.end());
  const double median =
      v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  char b[96];
  std::snprintf(b, sizeof b, "\"%.*f (%.*f-%.*f)\"", digits, median, digits, v.front(), digits,
                v.back());
  return b;
}

} // namespace

int main(int argc, char** argv) {
  long chunk_mib = 16, chunks = 4, rounds = 8;
  int helper_cpu = 0, other_cpu = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : nullptr;
    char* end = nullptr;
    auto number = [&](long lo, long hi) {
      const long n = v ? std::strtol(v, &end, 10) : 0;
      if (!v || *end != '\0' || n < lo || n > hi) {
        std::fprintf(stderr, "page_prep_wait: %s wants a number from %ld to %ld\n", a.c_str(), lo,
                     hi);
        std::exit(2);
      }
      ++i;
      return n;
    };
    if (a == "--chunk-mib") {
      chunk_mib = number(1, 1024);
    } else if (a == "--chunks") {
      chunks = number(1, 64);
    } else if (a == "--rounds") {
      rounds = number(1, 1000);
    } else if (a == "--cpus" && v && std::sscanf(v, "%d,%d", &helper_cpu, &other_cpu) == 2) {
      ++i;
    } else {
      std::fprintf(stderr, "usage: page_prep_wait [--chunk-mib 16] [--chunks 4] [--rounds 8] "
                           "[--cpus HELPER,OTHER]\n");
      return 2;
    }
  }
  const std::size_t chunk = static_cast<std::size_t>(chunk_mib) << 20;
  std::vector<result> by_mode[3];
  for (long r = 0; r < rounds; ++r) {
    for (int k = 0; k < 3; ++k) {
      const int j = static_cast<int>(r % 2 == 0 ? (k + r / 2) % 3 : 2 - (k + r / 2) % 3);
      const result x =
          run(static_cast<mode>(j), chunk, static_cast<int>(chunks), helper_cpu, other_cpu);
      by_mode[j].push_back(x);
      std::printf("{\"round\": %ld, \"mode\": \"%s\", \"helper_ms_per_mib\": %.3f, \"calls\": %zu, "
                  "\"p50_us\": %.1f, \"p999_us\": %.1f, \"max_us\": %.1f, \"over_1ms\": %zu}\n",
                  r, k_modes[j], x.ms_per_mib, x.calls, x.p50_us, x.p999_us, x.max_us, x.over_1ms);
    }
  }
  for (int k = 0; k < 3; ++k) {
    std::vector<double> ms, p999, mx, over;
    for (const result& x : by_mode[k]) {
      ms.push_back(x.ms_per_mib);
      p999.push_back(x.p999_us);
      mx.push_back(x.max_us);
      over.push_back(static_cast<double>(x.over_1ms));
    }
    std::printf("{\"summary\": \"%s\", \"rounds\": %ld, \"chunk_mib\": %ld, \"chunks\": %ld, "
                "\"helper_ms_per_mib\": %s, \"p999_us\": %s, \"max_us\": %s, \"over_1ms\": %s}\n",
                k_modes[k], rounds, chunk_mib, chunks, spread(ms, 3).c_str(),
                spread(p999, 0).c_str(), spread(mx, 0).c_str(), spread(over, 0).c_str());
  }
  return 0;
}
