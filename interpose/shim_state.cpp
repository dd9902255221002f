#include "interpose/shim_state.h"

namespace gmem::shim {

std::atomic<bool> g_active{false};
std::atomic<std::uint64_t> g_passthrough_counts[trace::k_alloc_kind_count];
thread_local bool t_in_hook __attribute__((tls_model("initial-exec"))) = false;

namespace {

const options* g_options = nullptr; // set once by init, never freed
std::atomic<bool> g_exiting{false};
std::atomic<bool> g_forked_child{false};

} // namespace

const options& set_options(const options* o) {
  g_options = o;
  return *o;
}

const options& shim_options() {
  static const options* k_defaults = new options(options::defaults()); // outlives exit
  return g_options != nullptr ? *g_options : *k_defaults;
}

void mark_exiting() {
  g_exiting.store(true);
  g_active.store(false);
}
void mark_forked_child() {
  g_forked_child.store(true);
  g_active.store(false);
}

bool exiting() {
  return g_exiting.load(std::memory_order_relaxed);
}
bool forked_child() {
  return g_forked_child.load(std::memory_order_relaxed);
}

} // namespace gmem::shim
