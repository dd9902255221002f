// Graph memory nodes through the driver API, linked with -lcuda (the fake): three allocation
// nodes (cuGraphAddMemAllocNode of 1 MiB and 2 MiB, the generic cuGraphAddNode of 512 KiB), a
// free node for the first, then the graph is destroyed and the process exits: the 2 MiB and
// 512 KiB allocations stay outstanding (the program never frees them). Exit 0 ok, 1 failed.
#include <cstdio>
#include <cuda.h>

namespace {
int g_failures = 0;
void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) {
    std::printf("FAIL: %s: %d\n", what, r);
    ++g_failures;
  }
}
} // namespace

int main() {
  CUcontext ctx = nullptr;
  check(cuInit(0), "cuInit");
  check(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
  check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
  CUgraph graph = nullptr;
  check(cuGraphCreate(&graph, 0), "cuGraphCreate");
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.poolProps.location.id = 0;
  CUgraphNode a = nullptr, b = nullptr, c = nullptr, f = nullptr;
  p.bytesize = 1 << 20;
  check(cuGraphAddMemAllocNode(&a, graph, nullptr, 0, &p), "alloc node 1 MiB");
  const CUdeviceptr first = p.dptr;
  p.bytesize = 2 << 20;
  check(cuGraphAddMemAllocNode(&b, graph, &a, 1, &p), "alloc node 2 MiB");
  CUgraphNodeParams g{};
  g.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  g.alloc.poolProps = p.poolProps;
  g.alloc.bytesize = 512 << 10;
  check(cuGraphAddNode(&c, graph, &b, nullptr, 1, &g), "generic alloc node 512 KiB");
  check(cuGraphAddMemFreeNode(&f, graph, &c, 1, first), "free node");
  std::printf("graph_probe first=0x%llx generic=0x%llx\n", static_cast<unsigned long long>(first),
              static_cast<unsigned long long>(g.alloc.dptr));
  check(cuGraphDestroy(graph), "cuGraphDestroy");
  return g_failures == 0 ? 0 : 1;
}
