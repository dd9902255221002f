// Two reference policies for the replay tool.
//   pow2_bins_policy  CUB's CachingDeviceAllocator as alloc_bench configures it: requests
//                     rounded up to a power of two (512 B .. 256 MiB), freed blocks cached per
//                     bin and never returned; larger requests allocated exactly and released.
//   exact_policy      no caching: every request is its own driver allocation, 512-byte
//                     rounded up to 1 MiB and 2 MiB-page rounded above (the driver's
//                     granularity), released at free; the floor a pool is measured against.
#pragma once

#include "bench/replay/replay_policy.h"

#include <map>
#include <string>
#include <vector>

namespace gmem_bench {

inline std::size_t round_up(std::size_t v, std::size_t to) {
  return (v + to - 1) / to * to;
}

class pow2_bins_policy final : public replay_policy {
public:
  std::string name() const override { return "pow2-bins (CUB-like)"; }
  bool allocate(std::uint32_t id, std::size_t bytes, std::uint64_t) override {
    std::size_t b = bin_bytes(bytes);
    if (id >= size_of_.size()) size_of_.resize(id + 1u, 0);
    size_of_[id] = b;
    if (b <= k_max_bin) {
      auto it = cached_.find(b);
      if (it != cached_.end() && it->second > 0) {
        --it->second;
        return true;
      }
    }
    reserved_ += b;
    ++maps_;
    return true;
  }
  void deallocate(std::uint32_t id) override {
    std::size_t b = size_of_[id];
    if (b <= k_max_bin) {
      ++cached_[b];
    } else {
      reserved_ -= b;
      ++unmaps_;
    }
  }
  std::size_t reserved_bytes() const override { return reserved_; }
  std::string details() const override {
    return "segment_maps=" + std::to_string(maps_) + " segment_unmaps=" + std::to_string(unmaps_) +
           " fences=0";
  }

private:
  static constexpr std::size_t k_max_bin = std::size_t{256} << 20;
  static std::size_t bin_bytes(std::size_t bytes) {
    if (bytes > k_max_bin) return round_up(bytes, std::size_t{2} << 20);
    std::size_t b = 512;
    while (b < bytes)
      b <<= 1;
    return b;
  }
  std::map<std::size_t, std::size_t> cached_; // bin bytes -> free blocks in it
  std::vector<std::size_t> size_of_;
  std::size_t reserved_ = 0, maps_ = 0, unmaps_ = 0;
};

class exact_policy final : public replay_policy {
public:
  std::string name() const override { return "exact (no caching)"; }
  bool allocate(std::uint32_t id, std::size_t bytes, std::uint64_t) override {
    std::size_t b = bytes <= (std::size_t{1} << 20) ? round_up(std::max<std::size_t>(bytes, 1), 512)
                                                    : round_up(bytes, std::size_t{2} << 20);
    if (id >= size_of_.size()) size_of_.resize(id + 1u, 0);
    size_of_[id] = b;
    reserved_ += b;
    return true;
  }
  void deallocate(std::uint32_t id) override {
    reserved_ -= size_of_[id];
    ++frees_;
  }
  std::size_t reserved_bytes() const override { return reserved_; }
  std::string
  details() const override { // a cudaMalloc per allocation, a synchronizing cudaFree per free
    return "segment_maps=" + std::to_string(size_of_.size()) +
           " segment_unmaps=" + std::to_string(frees_) + " fences=" + std::to_string(frees_);
  }

private:
  std::vector<std::size_t> size_of_;
  std::size_t reserved_ = 0;
  std::size_t frees_ = 0;
};

} // namespace gmem_bench
