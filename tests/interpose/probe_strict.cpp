// GMEM_STRICT against the fake driver: the driver's free waits for the device and its
// allocation orders streams; pooled calls do neither unless strict mode is on.
//   strict_free:  a slow "kernel" on a non-blocking stream writes mapped pinned host memory;
//                 the program frees an unrelated device buffer (cuMemFree) and reads the host
//                 memory at once. The driver's free waited for the kernel: the value is there.
//   strict_alloc: a slow write on one non-blocking stream, then cuMemAlloc, then a fast write
//                 of the same bytes on another: the allocation orders them, the fast write
//                 lands last.
// Each prints "NAME ok=0|1 ..." for interpose_test.cpp; exit 0 either way (the test decides).
#include <chrono>

#include "tests/interpose/probe_check.h"

namespace probe {
namespace {

constexpr unsigned k_slow_us = 200000;
constexpr std::size_t k_bytes = 4096;

CUstream nonblocking_stream() {
  CUstream s = nullptr;
  CHECK_CU(g.stream_create_with_priority(&s, CU_STREAM_NON_BLOCKING, 0));
  return s;
}

} // namespace

void scenario_strict_free() {
  CUdeviceptr unrelated = 0;
  CHECK_CU(g.mem_alloc(&unrelated, 1 << 20));
  void* host = nullptr;
  CHECK_CU(g.mem_host_alloc(&host, k_bytes, CU_MEMHOSTALLOC_DEVICEMAP));
  auto* bytes = static_cast<volatile unsigned char*>(host);
  bytes[0] = 0;
  CUstream s = nonblocking_stream();
  // The fake's device pointers are host addresses: the kernel writes the mapped memory.
  CHECK_CU(g.launch_kernel(s, k_slow_us, reinterpret_cast<CUdeviceptr>(host), 0x5A, k_bytes));
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_CU(g.mem_free(unrelated)); // the program's barrier
  const auto waited =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  const unsigned seen = bytes[0];
  std::printf("strict_free ok=%d value=0x%02x free_us=%lld\n", seen == 0x5A ? 1 : 0, seen,
              static_cast<long long>(waited));
  CHECK_CU(g.stream_synchronize(s));
  CHECK_CU(g.mem_free_host(host));
  CHECK_CU(g.stream_destroy(s));
}

void scenario_strict_alloc() {
  CUdeviceptr x = 0, other = 0;
  CHECK_CU(g.mem_alloc(&x, k_bytes));
  CHECK_CU(g.memset_d8(x, 0, k_bytes));
  CUstream s1 = nonblocking_stream(), s2 = nonblocking_stream();
  CHECK_CU(g.launch_kernel(s1, k_slow_us, x, 0xAA, k_bytes)); // issued first, finishes late
  CHECK_CU(g.mem_alloc(&other, 1000));                        // orders s1's work before s2's
  CHECK_CU(g.launch_kernel(s2, 0, x, 0xBB, k_bytes));
  CHECK_CU(g.ctx_synchronize());
  unsigned char last = 0;
  CHECK_CU(g.memcpy_dtoh(&last, x, 1));
  std::printf("strict_alloc ok=%d value=0x%02x\n", last == 0xBB ? 1 : 0, last);
  CHECK_CU(g.mem_free(other));
  CHECK_CU(g.mem_free(x));
  CHECK_CU(g.stream_destroy(s1));
  CHECK_CU(g.stream_destroy(s2));
}

} // namespace probe
