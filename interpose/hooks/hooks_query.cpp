// Queries the pool changes the answer of: cuMemGetInfo (cached free pool memory is free; the
// limit is the total) and range queries on pooled pointers (they describe the block, not the
// segment the driver knows).
#include <algorithm>
#include <optional>

#include "interpose/hooks/hook_support.h"

namespace gmem::shim {
namespace {

std::optional<block_info> pooled_block(std::uintptr_t address) {
  std::optional<block_info> found;
  pools().for_each([&](const context_entry& e) {
    if (found) return;
    found = e.device_pool->find(address);
    const std::size_t h = e.host_count.load(std::memory_order_acquire);
    for (std::size_t j = 0; j < h && !found; ++j)
      found = e.host[j].host_pool->find(address);
  });
  return found;
}

// Overwrites the range attributes of `attribute` at `data` with the block's; false for others.
bool block_attribute(const block_info& b, CUpointer_attribute attribute, void* data) {
  if (data == nullptr) return false;
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR) {
    *static_cast<CUdeviceptr*>(data) = b.address;
    return true;
  }
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
    *static_cast<std::size_t*>(data) = b.size;
    return true;
  }
  return false;
}

// The memory-info answer for a program under the pool (see cuMemGetInfo_v2 below).
void adjust_mem_info(std::size_t* free_bytes, std::size_t* total_bytes) {
  const real_driver* real = driver();
  context_entry* e = real != nullptr ? pools().find_current(*real) : nullptr;
  std::uint64_t live = 0;
  std::uint64_t limit = 0;
  if (e != nullptr) {
    const pool_stats s = e->device_pool->stats();
    *free_bytes += s.reserved_bytes - std::min(s.live_bytes, s.reserved_bytes);
    live = s.live_bytes;
    limit = s.limit_bytes;
  } else if (shim_options().limit_set) {
    limit = shim_options().limit.resolve(*total_bytes);
  }
  if (limit != 0) {
    *total_bytes = std::min<std::size_t>(*total_bytes, limit);
    *free_bytes = std::min<std::size_t>(*free_bytes, limit - std::min(live, limit));
  }
  *free_bytes = std::min(*free_bytes, *total_bytes);
}

} // namespace
} // namespace gmem::shim

using namespace gmem::shim;

// free = driver's free + memory the pool holds but does not use; with a limit, total = limit
// and free never exceeds what the pool may still hand out.
GMEM_HOOK CUresult cuMemGetInfo_v2(std::size_t* free_bytes, std::size_t* total_bytes) {
  const CUresult r = GMEM_REAL(cuMemGetInfo_v2, free_bytes, total_bytes);
  if (r != CUDA_SUCCESS || !shim_active() || free_bytes == nullptr || total_bytes == nullptr)
    return r;
  adjust_mem_info(free_bytes, total_bytes);
  return r;
}

GMEM_HOOK CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, std::size_t* size, CUdeviceptr p) {
  if (shim_active()) {
    if (auto b = pooled_block(p)) {
      if (base != nullptr) *base = b->address;
      if (size != nullptr) *size = b->size;
      return CUDA_SUCCESS;
    }
  }
  return GMEM_REAL(cuMemGetAddressRange_v2, base, size, p);
}

GMEM_HOOK CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr p) {
  const CUresult r = GMEM_REAL(cuPointerGetAttribute, data, attribute, p);
  if (r != CUDA_SUCCESS || !shim_active()) return r;
  if (attribute == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ||
      attribute == CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
    if (auto b = pooled_block(p)) block_attribute(*b, attribute, data);
  }
  return r;
}

GMEM_HOOK CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attributes,
                                          void** data, CUdeviceptr p) {
  const CUresult r = GMEM_REAL(cuPointerGetAttributes, n, attributes, data, p);
  if (r != CUDA_SUCCESS || !shim_active() || attributes == nullptr || data == nullptr) return r;
  std::optional<gmem::block_info> b;
  for (unsigned i = 0; i < n; ++i) {
    if (attributes[i] != CU_POINTER_ATTRIBUTE_RANGE_START_ADDR &&
        attributes[i] != CU_POINTER_ATTRIBUTE_RANGE_SIZE) {
      continue;
    }
    if (!b) b = pooled_block(p);
    if (!b) break;
    block_attribute(*b, attributes[i], data[i]);
  }
  return r;
}
