// The probe's memory scenarios: pointers, errors, limits, ranges, async and pinned memory, the
// reuse hazard, threads, capture, IPC, stream teardown (see shim_probe.cpp).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "tests/interpose/probe_check.h"

namespace probe {

// Distinct, non-overlapping, 256-aligned pointers that hold what was written to them.
void scenario_basic() {
  std::mt19937 rng(7);
  std::vector<block> blocks;
  for (int i = 0; i < 200; ++i) {
    const std::size_t n = 1 + rng() % (i % 10 == 0 ? (3u << 20) : (64u << 10));
    CUdeviceptr p = 0;
    CHECK_CU(g.mem_alloc(&p, n));
    CHECK(p % 256 == 0, "pointer 0x%llx not 256-aligned", static_cast<unsigned long long>(p));
    CHECK_CU(g.memset_d8(p, static_cast<unsigned char>(i), n));
    blocks.push_back({p, n});
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    unsigned char first = 0, last = 0;
    CHECK_CU(g.memcpy_dtoh(&first, blocks[i].p, 1));
    CHECK_CU(g.memcpy_dtoh(&last, blocks[i].p + blocks[i].n - 1, 1));
    CHECK(first == static_cast<unsigned char>(i) && last == first, "block %zu overwritten", i);
  }
  std::vector<block> sorted = blocks;
  std::sort(sorted.begin(), sorted.end(), [](const block& a, const block& b) { return a.p < b.p; });
  for (std::size_t i = 1; i < sorted.size(); ++i) {
    CHECK(sorted[i - 1].p + sorted[i - 1].n <= sorted[i].p, "blocks %zu and %zu overlap", i - 1, i);
  }
  for (const block& b : blocks)
    CHECK_CU(g.mem_free(b.p));
}

// The driver's errors: 0 bytes, unknown pointer, double free, interior free.
void scenario_errors() {
  CUdeviceptr p = 0;
  CUresult r = g.mem_alloc(&p, 0);
  CHECK(r == CUDA_ERROR_INVALID_VALUE, "cuMemAlloc(0) returned %d", r);
  r = g.mem_free(static_cast<CUdeviceptr>(0x1000));
  CHECK(r == CUDA_ERROR_INVALID_VALUE, "free of an unknown pointer returned %d", r);
  CHECK_CU(g.mem_alloc(&p, 4096));
  CHECK_CU(g.mem_free(p));
  r = g.mem_free(p);
  CHECK(r == CUDA_ERROR_INVALID_VALUE, "double free returned %d", r);
  CUdeviceptr q = 0;
  CHECK_CU(g.mem_alloc(&q, 4096));
  r = g.mem_free(q + 256);
  CHECK(r == CUDA_ERROR_INVALID_VALUE, "interior free returned %d", r);
  CHECK_CU(g.mem_free(q));
  void* h = nullptr;
  CHECK_CU(g.mem_alloc_host(&h, 100));
  r = g.mem_free_host(static_cast<char*>(h) + 512);
  CHECK(r == CUDA_ERROR_INVALID_VALUE, "interior host free returned %d", r);
  CHECK_CU(g.mem_free_host(h));
  int on_stack = 0;
  r = g.mem_free_host(&on_stack);
  CHECK(r == CUDA_ERROR_INVALID_VALUE, "host free of a stack address returned %d", r);
}

void print_info(const char* label) {
  std::size_t free_bytes = 0, total = 0;
  CHECK_CU(g.mem_get_info(&free_bytes, &total));
  std::printf("meminfo %s free=%zu total=%zu\n", label, free_bytes, total);
}

void scenario_meminfo() {
  print_info("start");
  CUdeviceptr p = 0;
  CHECK_CU(g.mem_alloc(&p, 16u << 20));
  print_info("allocated");
  CHECK_CU(g.mem_free(p));
  CHECK_CU(g.ctx_synchronize());
  print_info("freed");
}

// At the limit: the second 40 MiB does not fit in 64 MiB until the first is freed.
void scenario_limit() {
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(g.mem_alloc(&a, 40u << 20));
  CUresult r = g.mem_alloc(&b, 40u << 20);
  CHECK(r == CUDA_ERROR_OUT_OF_MEMORY, "second 40 MiB under a 64 MiB limit returned %d", r);
  CHECK_CU(g.mem_free(a));
  CHECK_CU(g.mem_alloc(&b, 40u << 20));
  CHECK_CU(g.mem_free(b));
}

void scenario_range() {
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(g.mem_alloc(&a, 1000));
  CHECK_CU(g.mem_alloc(&b, 1000));
  CUdeviceptr base = 0;
  std::size_t size = 0;
  CHECK_CU(g.mem_get_address_range(&base, &size, b + 100));
  CHECK(base == b && size >= 1000 && size < 4096, "range of b+100: base 0x%llx size %zu",
        static_cast<unsigned long long>(base), size);
  CUdeviceptr start = 0;
  CHECK_CU(g.pointer_get_attribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, a + 10));
  CHECK(start == a, "RANGE_START_ADDR of a+10 is 0x%llx", static_cast<unsigned long long>(start));
  CUcontext ctx = nullptr;
  std::size_t range = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
                                 CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&ctx, &start, &range};
  CHECK_CU(g.pointer_get_attributes(3, attrs, data, b + 999));
  CHECK(start == b && range == size && ctx != nullptr, "attributes of b+999");
  CHECK_CU(g.mem_free(a));
  CHECK_CU(g.mem_free(b));
}

void scenario_async() {
  CUstream s1 = nullptr, s2 = nullptr;
  CHECK_CU(g.stream_create(&s1, CU_STREAM_NON_BLOCKING));
  CHECK_CU(g.stream_create(&s2, CU_STREAM_NON_BLOCKING));
  for (int round = 0; round < 50; ++round) {
    CUdeviceptr a = 0, b = 0, c = 0;
    CHECK_CU(g.mem_alloc_async(&a, 10000, s1));
    CHECK_CU(g.mem_alloc_async(&b, 300000, s2));
    CHECK_CU(g.mem_alloc_async(&c, 10000, nullptr));
    CHECK_CU(g.memset_d8_async(a, 1, 10000, s1));
    CHECK_CU(g.memset_d8_async(b, 2, 300000, s2));
    CHECK_CU(g.mem_free_async(a, s1));
    CHECK_CU(g.mem_free_async(b, s2));
    CHECK_CU(g.mem_free_async(c, nullptr));
  }
  CHECK_CU(g.stream_synchronize(s1));
  CHECK_CU(g.stream_synchronize(s2));
  CHECK_CU(g.ctx_synchronize());
}

// The CUDA runtime's cudaMallocAsync reaches cuMemAllocAsync with no context current on the
// thread: the pool of the stream's context must serve it (run first, so no pool exists yet).
void scenario_async_no_context() {
  CUstream s = nullptr;
  CHECK_CU(g.stream_create(&s, CU_STREAM_NON_BLOCKING));
  CHECK_CU(g.ctx_set_current(nullptr));
  std::thread([s] {
    for (int i = 0; i < 100; ++i) {
      CUdeviceptr p = 0;
      CHECK_CU(g.mem_alloc_async(&p, 4096, s));
      CHECK_CU(g.mem_free_async(p, s));
    }
  }).join();
  CUcontext ctx = nullptr;
  CHECK_CU(g.primary_retain(&ctx, 0));
  CHECK_CU(g.ctx_set_current(ctx));
  CHECK_CU(g.stream_synchronize(s));
}

void scenario_host() {
  std::vector<void*> blocks;
  for (int i = 0; i < 100; ++i) {
    void* p = nullptr;
    if (i % 2 == 0) {
      CHECK_CU(g.mem_host_alloc(&p, 4096, 0));
    } else {
      CHECK_CU(g.mem_alloc_host(&p, 4096));
    }
    std::memset(p, i, 4096);
    blocks.push_back(p);
  }
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    CHECK(static_cast<unsigned char*>(blocks[i])[4095] == static_cast<unsigned char>(i),
          "host block %zu overwritten", i);
    CHECK_CU(g.mem_free_host(blocks[i]));
  }
}

// docs/design.md "Reuse safety": a slow kernel writes a block after the program freed it; the next
// owner's memset must not be overwritten. `async`: the stream-ordered variant.
int scenario_hazard(bool async) {
  constexpr std::size_t n = 1u << 20;
  CUstream slow = nullptr, other = nullptr;
  CHECK_CU(g.stream_create(&slow, CU_STREAM_NON_BLOCKING));
  CHECK_CU(g.stream_create(&other, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(async ? g.mem_alloc_async(&a, n, slow) : g.mem_alloc(&a, n));
  CHECK_CU(g.launch_kernel(slow, 300000, a, 0xAA, n));
  CHECK_CU(async ? g.mem_free_async(a, slow) : g.mem_free(a));
  CHECK_CU(async ? g.mem_alloc_async(&b, n, other) : g.mem_alloc(&b, n));
  CHECK_CU(g.memset_d8_async(b, 0, n, other));
  CHECK_CU(g.stream_synchronize(other));
  CHECK_CU(g.ctx_synchronize());
  std::vector<unsigned char> host(n);
  CHECK_CU(g.memcpy_dtoh(host.data(), b, n));
  const bool corrupted =
      std::any_of(host.begin(), host.end(), [](unsigned char c) { return c != 0; });
  std::printf("hazard reused=%d corrupted=%d\n", a == b ? 1 : 0, corrupted ? 1 : 0);
  return corrupted ? 3 : 0;
}

// 8 threads, each keeping up to 16 live blocks stamped with its id.
void scenario_stress() {
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  CUcontext ctx = nullptr;
  CHECK_CU(g.primary_retain(&ctx, 0));
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([t, ctx, &errors] {
      g.ctx_set_current(ctx);
      std::mt19937 rng(static_cast<unsigned>(t));
      std::vector<block> live;
      const auto stamp = static_cast<unsigned char>(t + 1);
      for (int i = 0; i < 3000; ++i) {
        if (live.size() < 16 && (live.empty() || rng() % 2 == 0)) {
          const std::size_t n = 1 + rng() % (rng() % 8 == 0 ? (2u << 20) : (16u << 10));
          CUdeviceptr p = 0;
          if (g.mem_alloc(&p, n) != CUDA_SUCCESS) {
            ++errors;
            continue;
          }
          std::memset(reinterpret_cast<void*>(p), stamp, n); // fake device memory is host memory
          live.push_back({p, n});
        } else {
          const std::size_t k = rng() % live.size();
          const block b = live[k];
          auto* bytes = reinterpret_cast<unsigned char*>(b.p);
          if (bytes[0] != stamp || bytes[b.n - 1] != stamp || bytes[b.n / 2] != stamp) ++errors;
          if (g.mem_free(b.p) != CUDA_SUCCESS) ++errors;
          live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
        }
      }
      for (const block& b : live) {
        if (g.mem_free(b.p) != CUDA_SUCCESS) ++errors;
      }
    });
  }
  for (auto& th : threads)
    th.join();
  CHECK(errors == 0, "%d errors", errors.load());
}

// Allocations on a capturing stream belong to the graph: they reach the driver unchanged. The
// capture begins and ends through the driver's functions (the shim counts open captures and
// asks the driver only while one is open); after its end the stream is pooled again.
// "capture_10000": the capture begins through the CUDA 10.0 form, cuStreamBeginCapture(stream).
void scenario_capture(bool form_10000) {
  CUstream s = nullptr;
  CHECK_CU(g.stream_create(&s, CU_STREAM_NON_BLOCKING));
  if (form_10000)
    CHECK_CU(g.stream_begin_capture_10000(s));
  else
    CHECK_CU(g.stream_begin_capture(s, CU_STREAM_CAPTURE_MODE_RELAXED));
  CUdeviceptr p = 0;
  CHECK_CU(g.mem_alloc_async(&p, 12345, s));
  CHECK_CU(g.mem_free_async(p, s));
  CUgraph graph = nullptr;
  CHECK_CU(g.stream_end_capture(s, &graph));
  CHECK_CU(g.mem_alloc_async(&p, 23456, s));
  CHECK_CU(g.mem_free_async(p, s));
  CHECK_CU(g.stream_synchronize(s));
}

// IPC handles name the driver's allocation, the whole segment for pooled blocks: of two
// blocks in one segment, the one at its start exports, the other is refused.
void scenario_ipc() {
  CUdeviceptr a = 0, b = 0;
  CHECK_CU(g.mem_alloc(&a, 1000));
  CHECK_CU(g.mem_alloc(&b, 1000));
  CUipcMemHandle ha{}, hb{};
  const CUresult ra = g.ipc_get_mem_handle(&ha, a);
  const CUresult rb = g.ipc_get_mem_handle(&hb, b);
  std::printf("ipc a=%d b=%d\n", ra, rb);
  CHECK(ra == CUDA_SUCCESS && rb == CUDA_SUCCESS, "a block of a pooled segment was not exported");
  CHECK(std::memcmp(&ha, &hb, sizeof ha) != 0, "two blocks got the same handle");
  CHECK_CU(g.mem_free(a));
  CHECK_CU(g.mem_free(b));
}

// A stream destroyed while it owns stream-freed blocks: they wait for a fence, so its handle
// value, if reused, cannot be handed blocks its old work still writes; the host does not wait.
void scenario_stream_destroy() {
  CUstream s = nullptr;
  CHECK_CU(g.stream_create(&s, CU_STREAM_NON_BLOCKING));
  CUdeviceptr a = 0;
  CHECK_CU(g.mem_alloc_async(&a, 4096, s));
  CHECK_CU(g.launch_kernel(s, 100000, a, 0xAA, 4096));
  CHECK_CU(g.mem_free_async(a, s));
  fake_cuda_counters before{}, after{};
  g.get_counters(&before);
  CHECK_CU(g.stream_destroy(s));
  g.get_counters(&after);
  std::printf("stream_destroy synchronized=%d\n", after.stream_syncs > before.stream_syncs ? 1 : 0);
}

} // namespace probe
