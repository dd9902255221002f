// Replays an allocation trace (bench/replay/alloc_trace.h format: "a <addr> <bytes> <stream>",
// "f <addr>") on the GPU through cudaMallocAsync (the default pool, release threshold kept)
// and through CUB's CachingDeviceAllocator, and prints one JSON line per allocator with the
// peak live bytes the trace asks for and the peak reserved bytes the allocator needed.
//   replay_gpu TRACE
// The policies that need no GPU (gmem's pool, a PyTorch-like one) are replayed by
// gmem_replay on any machine.
#include <cub/util_allocator.cuh>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

struct event {
  bool alloc;
  std::uint64_t addr;
  std::size_t bytes;
};

std::vector<event> read_trace(const char* path) {
  std::vector<event> ev;
  FILE* f = std::fopen(path, "r");
  if (!f) {
    std::fprintf(stderr, "replay_gpu: cannot open trace '%s'; nothing replayed\n", path);
    std::exit(2);
  }
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long addr = 0, bytes = 0;
    if (line[0] == 'a' && std::sscanf(line + 1, "%llx %llu", &addr, &bytes) == 2)
      ev.push_back({true, addr, bytes});
    else if (line[0] == 'f' && std::sscanf(line + 1, "%llx", &addr) == 1)
      ev.push_back({false, addr, 0});
  }
  std::fclose(f);
  return ev;
}

template <class Alloc, class Free, class Reserved>
bool replay(const std::vector<event>& ev, Alloc alloc, Free release, Reserved reserved,
            std::size_t& peak_live, std::size_t& peak_reserved) {
  std::unordered_map<std::uint64_t, std::pair<void*, std::size_t>> live;
  std::size_t live_bytes = 0;
  peak_live = peak_reserved = 0;
  for (const auto& e : ev) {
    if (e.alloc) {
      void* p = nullptr;
      if (!alloc(&p, e.bytes)) return false;
      live[e.addr] = {p, e.bytes};
      live_bytes += e.bytes;
      peak_live = std::max(peak_live, live_bytes);
      peak_reserved = std::max(peak_reserved, reserved());
    } else {
      auto it = live.find(e.addr);
      if (it == live.end()) continue; // freed before the recording started
      if (!release(it->second.first)) return false;
      live_bytes -= it->second.second;
      live.erase(it);
    }
  }
  for (auto& [k, v] : live)
    release(v.first);
  peak_reserved = std::max(peak_reserved, reserved());
  return true;
}

void print(const char* trace, const char* allocator, bool ok, std::size_t live, std::size_t res,
           std::size_t events) {
  const char* base = std::strrchr(trace, '/');
  std::printf("{\"kind\":\"replay\",\"where\":\"gpu\",\"trace\":\"%s\",\"policy\":\"%s\","
              "\"ok\":%s,\"events\":%zu,\"peak_live\":%zu,\"peak_reserved\":%zu,"
              "\"ratio\":%.4f}\n",
              base ? base + 1 : trace, allocator, ok ? "true" : "false", events, live, res,
              live ? double(res) / double(live) : 0.0);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: replay_gpu TRACE\n");
    return 2;
  }
  const auto ev = read_trace(argv[1]);
  cudaStream_t s;
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  {
    cudaMemPool_t pool;
    cudaDeviceGetDefaultMemPool(&pool, 0);
    std::uint64_t keep = UINT64_MAX, zero = 0;
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    cudaMemPoolTrimTo(pool, 0);
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &zero);
    cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero);
    auto reserved = [&] {
      std::uint64_t v = 0;
      cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &v);
      return static_cast<std::size_t>(v);
    };
    std::size_t live = 0, res = 0;
    bool ok = replay(
        ev, [&](void** p, std::size_t b) { return cudaMallocAsync(p, b, s) == cudaSuccess; },
        [&](void* p) { return cudaFreeAsync(p, s) == cudaSuccess; }, reserved, live, res);
    cudaStreamSynchronize(s);
    print(argv[1], "cudaMallocAsync", ok, live, res, ev.size());
    cudaMemPoolTrimTo(pool, 0);
  }
  {
    cub::CachingDeviceAllocator cub(2, 9, 28, std::size_t{64} << 30, true);
    auto reserved = [&] {
      auto& t = cub.cached_bytes[0];
      return t.free + t.live;
    };
    std::size_t live = 0, res = 0;
    bool ok = replay(
        ev, [&](void** p, std::size_t b) { return cub.DeviceAllocate(p, b, s) == cudaSuccess; },
        [&](void* p) { return cub.DeviceFree(p) == cudaSuccess; }, reserved, live, res);
    cudaStreamSynchronize(s);
    print(argv[1], "cub-pow2-bins", ok, live, res, ev.size());
    cub.FreeAllCached();
  }
  return 0;
}
