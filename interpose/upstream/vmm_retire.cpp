// Retirement (vmm_upstream.h, "Safety"): segments and arena pages given back wait behind an
// event that completes after all work issued so far; their physical pieces become spare at
// once; the spare budget bounds what is held; teardown unmaps once the event completed.
#include "interpose/upstream/vmm_detail.h"

#include <algorithm>

namespace gmem::shim {

using vmm_detail::now_ns;

std::size_t vmm_upstream::spare_budget() const noexcept {
  constexpr std::size_t k_min = std::size_t{256} << 20;
  const std::size_t reserved = pool_ != nullptr ? pool_->stats().reserved_bytes : 0;
  return std::max(k_min, reserved / 32);
}

void vmm_upstream::bound_spare() noexcept {
  const std::size_t budget = spare_budget();
  for (;;) {
    event_handle done = 0;
    {
      std::lock_guard lock(mu_);
      if (spare_bytes_ <= budget || retiring_.empty()) return;
      done = retiring_.front().done;
    }
    if (done == 0) return; // retired during a capture: nothing to wait for
    ctx_scope scope(link_);
    const std::uint64_t start = now_ns();
    if (link_.real->cuEventSynchronize(reinterpret_cast<CUevent>(done)) != CUDA_SUCCESS) return;
    {
      std::lock_guard lock(mu_);
      ++count_.spare_waits;
      count_.spare_wait_ns += now_ns() - start;
    }
    reap(false); // tears down the oldest (and any others now complete)
  }
}

// Completes after all work issued so far on every stream: the barrier makes the legacy
// stream wait for every non-blocking stream, and the legacy stream already follows every
// blocking one.
event_handle vmm_upstream::retire_event() noexcept {
  if (!fe_.barrier()) return 0;
  return fe_.record(0);
}

void vmm_upstream::teardown(const retiring& t) noexcept {
  const real_driver& r = *link_.real;
  ctx_scope scope(link_);
  const std::uint64_t start = now_ns();
  if (!t.page.empty()) { // arena pages: the range stays reserved for later extends
    for (std::size_t i = 0; i < t.page.size(); ++i)
      (void)r.cuMemUnmap(t.page[i], t.m.pieces[i].bytes);
  } else {
    std::size_t off = 0;
    for (const piece& p : t.m.pieces) {
      (void)r.cuMemUnmap(t.m.base + off, p.bytes);
      off += p.bytes;
    }
    (void)r.cuMemAddressFree(t.m.base, t.m.bytes);
  }
  std::vector<CUmemGenericAllocationHandle> release;
  {
    std::lock_guard lock(mu_);
    for (std::uintptr_t va : t.page)
      set_pages_locked(va, 1, page_state::unused);
    for (std::size_t i = 0; i < spare_.size();) {
      if (spare_[i].owner != t.seq) {
        ++i;
        continue;
      }
      release.push_back(spare_[i].p.handle);
      spare_bytes_ -= spare_[i].p.bytes;
      spare_[i] = spare_.back();
      spare_.pop_back();
    }
  }
  for (CUmemGenericAllocationHandle h : release)
    (void)r.cuMemRelease(h); // no longer mapped anywhere: the memory goes back
  std::lock_guard lock(mu_);
  ++count_.teardowns;
  count_.teardown_ns += now_ns() - start;
}

void vmm_upstream::reap(bool wait) noexcept {
  if (wait) {
    bool any = false;
    {
      std::lock_guard lock(mu_);
      any = !retiring_.empty();
    }
    if (!any || !fe_.synchronize()) wait = false; // capture: nothing can be waited for
  }
  for (;;) {
    std::uint64_t seq = 0;
    event_handle done = 0;
    {
      std::lock_guard lock(mu_);
      if (retiring_.empty()) return;
      seq = retiring_.front().seq;
      done = retiring_.front().done;
    }
    if (!wait) {
      if (done == 0) { // retired during a capture: try for an event now
        done = retire_event();
        if (done == 0) return;
        std::lock_guard lock(mu_);
        if (retiring_.empty() || retiring_.front().seq != seq || retiring_.front().done != 0) {
          fe_.release(done); // another thread got there first
          continue;
        }
        retiring_.front().done = done;
      }
      if (!fe_.query(done)) return; // later ones were retired after it
    }
    retiring t;
    {
      std::lock_guard lock(mu_);
      if (retiring_.empty() || retiring_.front().seq != seq) continue; // another thread took it
      t = std::move(retiring_.front());
      retiring_.pop_front();
    }
    if (t.done != 0) fe_.release(t.done);
    teardown(t);
  }
}

} // namespace gmem::shim
