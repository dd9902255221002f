#include "bench/replay/torch_like_policy.h"

#include "bench/replay/simple_policies.h"

namespace gmem_bench {
namespace {
constexpr std::size_t k_min_block = 512;
constexpr std::size_t k_small_size = std::size_t{1} << 20;   // small pool: <= 1 MiB
constexpr std::size_t k_small_buffer = std::size_t{2} << 20; // small segment
constexpr std::size_t k_large_buffer = std::size_t{20} << 20;
constexpr std::size_t k_min_large_alloc = std::size_t{10} << 20;
constexpr std::size_t k_round_large = std::size_t{2} << 20;
} // namespace

bool torch_like_policy::allocate(std::uint32_t id, std::size_t bytes, std::uint64_t stream) {
  const std::size_t size = bytes < k_min_block ? k_min_block : round_up(bytes, k_min_block);
  const bool small = size <= k_small_size;
  free_index& pool = small ? small_ : large_;
  block key;
  key.stream = stream;
  key.size = size;
  block* b = nullptr;
  auto it = pool.lower_bound(&key);
  if (it != pool.end() && (*it)->stream == stream) {
    b = *it;
    pool.erase(it);
  } else {
    const std::size_t seg = small                      ? k_small_buffer
                            : size < k_min_large_alloc ? k_large_buffer
                                                       : round_up(size, k_round_large);
    b = new_block();
    b->addr = next_addr_;
    b->size = seg;
    b->stream = stream;
    b->small = small;
    next_addr_ += seg;
    reserved_ += seg;
    segments_.push_back(b);
  }
  const std::size_t remaining = b->size - size;
  if (small ? remaining >= k_min_block : remaining > k_small_size) {
    block* rest = new_block();
    rest->addr = b->addr + size;
    rest->size = remaining;
    rest->stream = b->stream;
    rest->small = b->small;
    rest->prev = b;
    rest->next = b->next;
    if (b->next) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool.insert(rest);
  }
  b->allocated = true;
  if (id >= live_.size()) live_.resize(id + 1u, nullptr);
  live_[id] = b;
  return true;
}

void torch_like_policy::deallocate(std::uint32_t id) {
  block* b = live_[id];
  live_[id] = nullptr;
  b->allocated = false;
  free_index& pool = pool_of(b);
  if (block* p = b->prev; p && !p->allocated) { // absorb b into its free predecessor
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    b = p;
  }
  if (block* n = b->next; n && !n->allocated) { // absorb the free successor
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
  }
  pool.insert(b);
}

bool torch_like_policy::is_valid() const {
  std::size_t total = 0, free_count = 0;
  for (const block* s : segments_) {
    std::uintptr_t at = s->addr;
    for (const block* b = s; b; b = b->next) {
      if (b->addr != at) return false;
      at += b->size;
      total += b->size;
      if (!b->allocated) {
        ++free_count;
        if (b->next && !b->next->allocated) return false;
        const free_index& pool = b->small ? small_ : large_;
        if (!pool.count(const_cast<block*>(b))) return false;
      }
    }
  }
  return total == reserved_ && free_count == small_.size() + large_.size();
}

} // namespace gmem_bench
