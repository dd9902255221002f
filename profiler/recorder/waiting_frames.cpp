#include "profiler/recorder/waiting_frames.h"

#include <sys/prctl.h>

#include <cstring>
#include <string_view>

namespace gmem::trace {

namespace {

constexpr std::memory_order k_relaxed = std::memory_order_relaxed;
constexpr std::memory_order k_release = std::memory_order_release;
constexpr std::memory_order k_acquire = std::memory_order_acquire;

// At most this many tries to read a slot its owner is rewriting: a capture never waits.
constexpr int k_read_tries = 4;

} // namespace

constinit waiting_frames g_process_waiting_frames;

std::uint32_t waiting_frames::begin(wait_kind kind, const std::uint64_t* words, unsigned count,
                                    const void* ctx) noexcept {
  if (count == 0) return 0;
  if (count > k_max_words) count = k_max_words;
  for (unsigned i = 0; i < k_slots; ++i) {
    slot& s = slots_[i];
    bool expected = false;
    if (!s.claimed.compare_exchange_strong(expected, true, std::memory_order_acquire)) continue;
    const std::uint64_t v = s.version.load(k_relaxed);
    s.version.store(v + 1, k_relaxed);
    // Each store releases the odd version before it: a reader that sees any of them sees the
    // version change when it checks again (a seqlock without fences, which TSan can follow).
    s.ctx.store(ctx, k_release);
    s.count.store(count, k_release);
    s.kind.store(static_cast<std::uint8_t>(kind), k_release);
    for (unsigned k = 0; k < count; ++k)
      s.words[k].store(words[k], k_release);
    s.order.store(next_order_.fetch_add(1, k_relaxed) + 1, k_release);
    s.version.store(v + 2, std::memory_order_release);
    waiting_.fetch_add(1, std::memory_order_release);
    return i + 1;
  }
  return 0;
}

void waiting_frames::end(std::uint32_t token) noexcept {
  if (token == 0 || token > k_slots) return;
  slot& s = slots_[token - 1];
  if (!s.claimed.load(k_relaxed)) return;
  const std::uint64_t v = s.version.load(k_relaxed);
  s.version.store(v + 1, k_relaxed);
  s.order.store(0, k_release);
  s.version.store(v + 2, std::memory_order_release);
  waiting_.fetch_sub(1, std::memory_order_release);
  s.claimed.store(false, std::memory_order_release);
}

waiting_frames::lent waiting_frames::lend(std::uint64_t* out, unsigned max,
                                          const void* ctx) const noexcept {
  lent got;
  if (!any() || max == 0) return got;
  for (int attempt = 0; attempt < k_read_tries; ++attempt) {
    // The latest registration of this writer, and how many threads wait.
    unsigned best = k_slots, waiting = 0;
    std::uint64_t best_order = 0, best_version = 0;
    for (unsigned i = 0; i < k_slots; ++i) {
      const slot& s = slots_[i];
      const std::uint64_t v = s.version.load(std::memory_order_acquire);
      if (v % 2 != 0) continue; // being registered or ended right now
      // Acquire loads: the version's second load cannot move before them.
      const std::uint64_t order = s.order.load(k_acquire);
      const void* owner = s.ctx.load(k_acquire);
      if (s.version.load(k_relaxed) != v || order == 0) continue;
      ++waiting;
      if (owner == ctx && order > best_order) best = i, best_order = order, best_version = v;
    }
    if (best == k_slots) return got;
    const slot& s = slots_[best];
    unsigned n = s.count.load(k_acquire);
    if (n > max) n = max;
    const auto kind = s.kind.load(k_acquire);
    for (unsigned k = 0; k < n; ++k)
      out[k] = s.words[k].load(k_acquire);
    if (s.version.load(k_relaxed) != best_version) continue; // ended (and perhaps reused)
    got.words = n;
    got.waiting = waiting;
    got.kind = static_cast<wait_kind>(kind);
    return got;
  }
  return got;
}

bool is_worker_name(wait_kind kind, const char* name) noexcept {
  if (name == nullptr) return false;
  switch (kind) {
  case wait_kind::backward: {
    constexpr std::string_view prefix = "pt_autograd_";
    const std::string_view n(name, strnlen(name, 16));
    return n.size() > prefix.size() && n.substr(0, prefix.size()) == prefix;
  }
  }
  return false;
}

bool is_worker_thread(wait_kind kind) noexcept {
  static thread_local std::int8_t t_worker = -1; // -1: not read yet
  if (t_worker < 0) {
    char name[17] = {};
    t_worker = prctl(PR_GET_NAME, name, 0, 0, 0) == 0 && is_worker_name(kind, name) ? 1 : 0;
  }
  return t_worker == 1;
}

} // namespace gmem::trace
