#include "interpose/strict_mode.h"

#include "interpose/real_call.h"

namespace gmem::shim {

namespace {

// The live entry whose pinned host pools own `address`, or nullptr.
context_entry* host_entry(std::uintptr_t address) {
  context_entry* found = nullptr;
  pools().for_each([&](context_entry& e) {
    const std::size_t h = e.host_count.load(std::memory_order_acquire);
    for (std::size_t j = 0; j < h && found == nullptr; ++j)
      if (e.host[j].host_pool->owns(address)) found = &e;
  });
  return found;
}

} // namespace

std::atomic<bool> g_strict{false};

CUresult synchronize_context(context_entry& e) {
  const real_driver& real = *e.link.real;
  std::uint64_t tickets[1 + context_entry::k_max_host_pools];
  const std::size_t host_count = e.host_count.load(std::memory_order_acquire);
  tickets[0] = e.device_pool->begin_external_fence();
  for (std::size_t j = 0; j < host_count; ++j)
    tickets[1 + j] = e.host[j].host_pool->begin_external_fence();
  CUresult r;
  {
    ctx_scope scope(e.link);
    r = real.cuCtxSynchronize();
  }
  if (r == CUDA_SUCCESS) {
    e.device_pool->end_external_fence(tickets[0]);
    for (std::size_t j = 0; j < host_count; ++j)
      e.host[j].host_pool->end_external_fence(tickets[1 + j]);
    if (e.vmm != nullptr) e.vmm->reap();
  }
  return r;
}

void strict_after_device_free(std::uintptr_t p) {
  if (context_entry* e = pools().device_owner(p, pools().last_used())) {
    hook_scope scope;
    (void)synchronize_context(*e);
  }
}

void strict_after_host_free(std::uintptr_t p) {
  if (context_entry* e = host_entry(p)) {
    hook_scope scope;
    (void)synchronize_context(*e);
  }
}

void strict_before_alloc(context_entry& e) {
  hook_scope scope;
  if (shim_options().barriers && e.fences->barrier()) return;
  (void)synchronize_context(e);
}

} // namespace gmem::shim
