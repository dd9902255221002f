// PyTorch's CUDA caching allocator (DeviceCachingAllocator, default settings: no
// max_split_size, no expandable segments, no garbage-collection threshold), rewritten from its
// documented behaviour for trace replay:
//   - sizes rounded up to 512 B; requests <= 1 MiB use the small pool, others the large pool;
//   - a new segment is 2 MiB for small requests, 20 MiB for requests under 10 MiB, else the
//     request rounded up to 2 MiB;
//   - best fit: the smallest free block of the same pool and stream that is large enough;
//   - split when the remainder is >= 512 B (small pool) or > 1 MiB (large pool);
//   - a freed block merges with free neighbours of its segment; segments are never released
//     (PyTorch only releases them on an out-of-memory retry or empty_cache()).
// Invariant (checked by is_valid()): the blocks of each segment tile it; every free block is
// in its pool's index and no two free neighbours exist.
#pragma once

#include "bench/replay/replay_policy.h"

#include <memory>
#include <set>
#include <string>
#include <vector>

namespace gmem_bench {

class torch_like_policy final : public replay_policy {
public:
  std::string name() const override { return "torch-like"; }
  bool allocate(std::uint32_t id, std::size_t bytes, std::uint64_t stream) override;
  void deallocate(std::uint32_t id) override;
  std::size_t reserved_bytes() const override { return reserved_; }
  bool is_valid() const;
  std::size_t segments() const { return segments_.size(); }
  std::string details() const override { // cudaMalloc per segment, never released
    return "segment_maps=" + std::to_string(segments_.size()) + " segment_unmaps=0 fences=0";
  }

private:
  struct block {
    std::uintptr_t addr = 0;
    std::size_t size = 0;
    std::uint64_t stream = 0;
    bool small = false;
    bool allocated = false;
    block* prev = nullptr; // neighbours in the same segment
    block* next = nullptr;
  };
  struct by_stream_size {
    bool operator()(const block* a, const block* b) const {
      if (a->stream != b->stream) return a->stream < b->stream;
      if (a->size != b->size) return a->size < b->size;
      return a->addr < b->addr;
    }
  };
  using free_index = std::set<block*, by_stream_size>;

  block* new_block() {
    blocks_.push_back(std::make_unique<block>());
    return blocks_.back().get();
  }
  free_index& pool_of(const block* b) { return b->small ? small_ : large_; }

  free_index small_, large_;
  std::vector<std::unique_ptr<block>> blocks_; // owns every block ever made (replay is short)
  std::vector<block*> segments_;               // first block of each segment
  std::vector<block*> live_;                   // id -> block
  std::uintptr_t next_addr_ = std::uintptr_t{1} << 40;
  std::size_t reserved_ = 0;
};

} // namespace gmem_bench
