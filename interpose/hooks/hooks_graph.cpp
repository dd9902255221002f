// Graph memory (cudaGraphAddMemAllocNode, cudaGraphAddNode with a memory node, and through
// them the driver's cuGraphAddMemAllocNode / cuGraphAddMemFreeNode / cuGraphAddNode): the
// driver fixes an allocation node's address when the node is created and owns the memory;
// gmem does not pool it but traces it, kind `capture` (printed "graph", like allocations made
// on a capturing stream): an allocation when the node is added, a free when a free node for
// the address is added (or when the program frees it with cuMemFree / cuMemFreeAsync after a
// launch: those hooks trace every free). So leaks, frag, report and the exports count it.
#include "interpose/hooks/hook_support.h"

namespace gmem::shim {
namespace {

using trace::alloc_kind;

void record_alloc(CUresult r, CUdeviceptr dptr, std::size_t bytes, const CUmemLocation& where,
                  std::uint32_t stack) {
  if (r != CUDA_SUCCESS || dptr == 0 || !shim_active()) return;
  count_passthrough(alloc_kind::capture);
  const int device = where.type == CU_MEM_LOCATION_TYPE_DEVICE ? where.id : current_device();
  trace::alloc(dptr, bytes, bytes, device, 0, alloc_kind::capture, stack);
}

void record_free(CUresult r, CUdeviceptr dptr) {
  if (r != CUDA_SUCCESS || dptr == 0 || !shim_active()) return;
  trace::free(dptr, current_device(), 0, alloc_kind::capture);
}

} // namespace
} // namespace gmem::shim

using namespace gmem::shim;

GMEM_HOOK CUresult cuGraphAddMemAllocNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                          std::size_t n, CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  const std::uint32_t stack = shim_active() ? gmem::trace::capture_stack() : 0;
  const CUresult r = GMEM_REAL(cuGraphAddMemAllocNode, node, graph, deps, n, params);
  if (params != nullptr)
    record_alloc(r, params->dptr, params->bytesize, params->poolProps.location, stack);
  return r;
}

GMEM_HOOK CUresult cuGraphAddMemFreeNode(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                         std::size_t n, CUdeviceptr dptr) {
  const CUresult r = GMEM_REAL(cuGraphAddMemFreeNode, node, graph, deps, n, dptr);
  record_free(r, dptr);
  return r;
}

GMEM_HOOK CUresult cuGraphAddNode_v2(CUgraphNode* node, CUgraph graph, const CUgraphNode* deps,
                                     const CUgraphEdgeData* edges, std::size_t n,
                                     CUgraphNodeParams* params) {
  const bool alloc = params != nullptr && params->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  const std::uint32_t stack = alloc && shim_active() ? gmem::trace::capture_stack() : 0;
  const CUresult r = GMEM_REAL(cuGraphAddNode_v2, node, graph, deps, edges, n, params);
  if (alloc) {
    record_alloc(r, params->alloc.dptr, params->alloc.bytesize, params->alloc.poolProps.location,
                 stack);
  } else if (params != nullptr && params->type == CU_GRAPH_NODE_TYPE_MEM_FREE) {
    record_free(r, params->free.dptr);
  }
  return r;
}
