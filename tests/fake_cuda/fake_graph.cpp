// Graph memory nodes in the fake driver (graphs are never executed here): cuGraphCreate /
// cuGraphDestroy, cuGraphAddMemAllocNode, cuGraphAddMemFreeNode and the generic cuGraphAddNode
// for those two node types. An allocation node reserves its memory at once (the real driver
// fixes the address at node creation) as a device allocation that cuMemFree can release; one
// freed by a free node of the same graph is released with the graph.
#include <cstring>
#include <vector>

#include "tests/fake_cuda/fake_state.h"

#define FAKE_API extern "C" __attribute__((visibility("default")))

using fake::get;

namespace {

struct fake_graph {
  std::vector<CUdeviceptr> freed_inside; // allocations a free node of this graph releases
  int nodes = 0;
};

CUgraphNode next_node(fake_graph* g) {
  return reinterpret_cast<CUgraphNode>(reinterpret_cast<std::uintptr_t>(g) + 16 + 16 * ++g->nodes);
}

CUresult add_alloc(CUgraphNode* node, CUgraph graph, std::size_t bytes, CUdeviceptr* dptr) {
  if (node == nullptr || graph == nullptr || dptr == nullptr || bytes == 0)
    return CUDA_ERROR_INVALID_VALUE;
  fake::context* c = fake::current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  const std::size_t rounded = (bytes + 511) / 512 * 512;
  int fd = -1;
  void* p = fake::alloc_storage(rounded, false, &fd);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  auto& st = get();
  {
    std::lock_guard lock(st.mu);
    *dptr = reinterpret_cast<CUdeviceptr>(p);
    st.allocs[*dptr] = {bytes, c, fake::mem_kind::device, st.next_buffer_id++, fd};
  }
  st.count.live_allocs++;
  *node = next_node(reinterpret_cast<fake_graph*>(graph));
  return CUDA_SUCCESS;
}

CUresult add_free(CUgraphNode* node, CUgraph graph, CUdeviceptr dptr) {
  if (node == nullptr || graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* g = reinterpret_cast<fake_graph*>(graph);
  {
    std::lock_guard lock(get().mu);
    if (get().allocs.count(dptr) == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  g->freed_inside.push_back(dptr);
  *node = next_node(g);
  return CUDA_SUCCESS;
}

} // namespace

FAKE_API CUresult cuGraphCreate(CUgraph* graph, unsigned int flags) {
  if (graph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  *graph = reinterpret_cast<CUgraph>(new fake_graph);
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphDestroy(CUgraph graph) {
  if (graph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* g = reinterpret_cast<fake_graph*>(graph);
  auto& st = get();
  for (CUdeviceptr p : g->freed_inside) {
    std::lock_guard lock(st.mu);
    auto it = st.allocs.find(p);
    if (it == st.allocs.end()) continue;
    fake::free_storage(p, it->second);
    st.allocs.erase(it);
    st.count.live_allocs--;
  }
  delete g;
  return CUDA_SUCCESS;
}

FAKE_API CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*,
                                         std::size_t, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return add_alloc(node, graph, params->bytesize, &params->dptr);
}

FAKE_API CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode*,
                                        std::size_t, CUdeviceptr dptr) {
  return add_free(node, graph, dptr);
}

FAKE_API CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode*,
                                    const CUgraphEdgeData*, std::size_t,
                                    CUgraphNodeParams* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC)
    return add_alloc(node, graph, params->alloc.bytesize, &params->alloc.dptr);
  if (params->type == CU_GRAPH_NODE_TYPE_MEM_FREE) return add_free(node, graph, params->free.dptr);
  return CUDA_ERROR_NOT_SUPPORTED; // the fake has no other node types
}
