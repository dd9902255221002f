// gmem's own pool (pool/pool.h, linked from libgmem_pool.a) under trace replay. The upstream
// places segments back to back in a fake address space and counts what is mapped; fences
// complete at once (the replay has no device work in flight). Allocations and frees are
// stream-less (cuMemAlloc_v2 / cuMemFree_v2): that is what PyTorch with
// PYTORCH_NO_CUDA_MEMORY_CACHING=1 sends gmem, through cudaMalloc/cudaFree. The arena
// policy's upstream maps arena pages (GMEM_ARENA=1) above the segments.
#include "bench/replay/replay_policy.h"
#include "pool/pool.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

namespace gmem_bench {
namespace {

// The VMM calls the shim's upstream (interpose/upstream/vmm_pages.cpp) would make: the arena's
// address space reserved once; a page handle created (unless a page given back earlier is
// recycled: the shim keeps their handles as spares) and mapped per page, one access call per
// growth; a page given back is unmapped and its handle kept. A stitched range is reserved,
// mapped page by page and given one access call; unstitched, it is unmapped page by page and
// its address space freed. Segments outside the arena are cuMemAlloc/cuMemFree (GMEM_VMM=0).
struct vmm_calls {
  std::size_t reserve = 0, address_free = 0, create = 0, release = 0, map = 0, unmap = 0,
              set_access = 0, mem_alloc = 0, mem_free = 0;
  std::size_t stitches = 0, stitched_pages = 0, unstitches = 0, unstitched_pages = 0;
  std::string text() const {
    auto n = [](const char* k, std::size_t v) { return std::string(k) + "=" + std::to_string(v); };
    return n("vmm_reserve", reserve) + " " + n("vmm_address_free", address_free) + " " +
           n("vmm_create", create) + " " + n("vmm_release", release) + " " + n("vmm_map", map) +
           " " + n("vmm_unmap", unmap) + " " + n("vmm_set_access", set_access) + " " +
           n("mem_alloc", mem_alloc) + " " + n("mem_free", mem_free) + " " +
           n("stitches", stitches) + " " + n("stitched_pages", stitched_pages) + " " +
           n("unstitches", unstitches) + " " + n("unstitched_pages", unstitched_pages);
  }
};

class counting_upstream final : public gmem::upstream {
public:
  explicit counting_upstream(std::size_t arena_page) : page_(arena_page) {}
  std::uintptr_t map(std::size_t bytes) noexcept override {
    const std::uintptr_t base = next_;
    next_ += (bytes + k_align - 1) / k_align * k_align;
    mapped_ += bytes;
    ++calls_.mem_alloc;
    return base;
  }
  void unmap(std::uintptr_t base, std::size_t bytes) noexcept override {
    mapped_ -= bytes;
    if (base >= k_arena) {
      for (std::uintptr_t p = base; p < base + bytes; p += page_) {
        pages_.erase(p);
        ++calls_.unmap;
        ++spares_;
      }
    } else {
      ++calls_.mem_free;
    }
  }
  std::size_t arena_page() const noexcept override { return page_; }
  // At `at` when those pages are unmapped, else above the highest page (as the shim does).
  std::uintptr_t extend(std::uintptr_t at, std::size_t bytes) noexcept override {
    auto unused = [&](std::uintptr_t base) {
      for (std::uintptr_t p = base; p < base + bytes; p += page_)
        if (pages_.count(p) != 0) return false;
      return base >= k_arena;
    };
    const std::uintptr_t base = at != 0 && unused(at) ? at : top_;
    if (top_ == k_arena) ++calls_.reserve;
    for (std::uintptr_t p = base; p < base + bytes; p += page_) {
      pages_.insert(p);
      ++calls_.map;
      if (spares_ != 0)
        --spares_;
      else
        ++calls_.create;
    }
    ++calls_.set_access;
    top_ = std::max(top_, base + bytes);
    mapped_ += bytes;
    return base;
  }
  bool can_stitch() const noexcept override { return page_ != 0; }
  std::uintptr_t stitch(const std::uintptr_t* pages, std::size_t count) noexcept override {
    for (std::size_t i = 0; i < count; ++i)
      if (pages_.count(pages[i]) == 0) {
        std::fprintf(stderr, "gmem_replay: the pool stitched a page that is not mapped\n");
        std::abort();
      }
    const std::uintptr_t base = stitch_next_;
    stitch_next_ += count * page_;
    ++calls_.reserve;
    calls_.map += count;
    ++calls_.set_access;
    ++calls_.stitches;
    calls_.stitched_pages += count;
    return base;
  }
  void unstitch(std::uintptr_t, std::size_t count) noexcept override {
    calls_.unmap += count;
    ++calls_.address_free;
    ++calls_.unstitches;
    calls_.unstitched_pages += count;
  }
  std::size_t mapped() const { return mapped_; }
  const vmm_calls& calls() const { return calls_; }

private:
  static constexpr std::size_t k_align = std::size_t{2} << 20;
  static constexpr std::uintptr_t k_arena = std::uintptr_t{1} << 46;
  std::uintptr_t next_ = std::uintptr_t{1} << 40;
  std::uintptr_t stitch_next_ = std::uintptr_t{1} << 45; // fresh ranges, never reused
  std::size_t mapped_ = 0;
  const std::size_t page_;
  std::set<std::uintptr_t> pages_;
  std::uintptr_t top_ = k_arena;
  std::size_t spares_ = 0;
  vmm_calls calls_;
};

class instant_fences final : public gmem::fences {
public:
  bool synchronize() noexcept override { return true; }
  gmem::event_handle record(gmem::stream_handle) noexcept override { return ++next_; }
  bool query(gmem::event_handle) noexcept override { return true; }
  bool wait(gmem::stream_handle, gmem::event_handle) noexcept override { return true; }
  void release(gmem::event_handle) noexcept override {}

private:
  gmem::event_handle next_ = 0;
};

// Options every gmem policy of this process is built with (--pool-option), and their text.
gmem::pool_options g_options;
std::string g_options_text;
std::size_t g_arena_page = std::size_t{16} << 20; // the shim's default (GMEM_ARENA_PAGE_MB)
bool g_arena_page_set = false;                    // --pool-option arena_page_bytes given
// gmem-stitch's page: the driver's granularity on the H100 and H200, the physical unit a
// stitched range is made of.
constexpr std::size_t k_stitch_page = std::size_t{2} << 20;

class gmem_policy final : public replay_policy {
public:
  // stream_frees: allocate and free on stream 0 (cuMemAllocAsync/cuMemFreeAsync), so freed
  // blocks are reusable at once; separates the fit policy from the pending/fence policy.
  // stitch: the arena with pool_options::stitch, on pages of 2 MiB unless arena_page_bytes
  // says otherwise.
  gmem_policy(bool stream_frees, bool arena, bool stitch = false)
      : up_(!arena                        ? 0
            : stitch && !g_arena_page_set ? k_stitch_page
                                          : g_arena_page),
        pool_(up_, fe_, with_arena(arena, stitch)),
        stream_(stream_frees ? gmem::stream_handle{0} : gmem::k_no_stream), arena_(arena),
        stitch_(stitch) {}
  static gmem::pool_options with_arena(bool arena, bool stitch) {
    gmem::pool_options o = g_options;
    o.arena = arena;
    o.stitch = stitch;
    return o;
  }
  std::string name() const override {
    const bool stream = stream_ != gmem::k_no_stream;
    std::string n = stitch_  ? (stream ? "gmem (stitch, stream frees)" : "gmem (stitch)")
                    : arena_ ? (stream ? "gmem (arena, stream-ordered frees)" : "gmem (arena)")
                             : (stream ? "gmem (stream-ordered frees)" : "gmem");
    return g_options_text.empty() ? n : n + " [" + g_options_text + "]";
  }
  bool allocate(std::uint32_t id, std::size_t bytes, std::uint64_t) override {
    gmem::alloc_result r = pool_.allocate(bytes == 0 ? 1 : bytes, stream_);
    if (r.status != gmem::pool_status::ok) return false;
    if (id >= addr_.size()) addr_.resize(id + 1u, 0);
    addr_[id] = r.address;
    return true;
  }
  void deallocate(std::uint32_t id) override {
    if (pool_.deallocate(addr_[id], stream_) != gmem::pool_status::ok)
      std::fprintf(stderr, "gmem_replay: gmem pool refused the free of allocation %u\n", id);
  }
  std::size_t reserved_bytes() const override { return up_.mapped(); }
  bool is_valid() const override { return pool_.is_valid(); }
  std::string details() const override {
    const gmem::pool_stats st = pool_.stats();
    std::string out;
#define GMEM_BENCH_STAT_(name, ...)                                                                \
  out += std::string(out.empty() ? "" : " ") + #name "=" + std::to_string(st.name);
    GMEM_POOL_STATS(GMEM_BENCH_STAT_)
#undef GMEM_BENCH_STAT_
    return out + " arena_page=" + std::to_string(up_.arena_page()) + " " + up_.calls().text();
  }

private:
  counting_upstream up_;
  instant_fences fe_;
  gmem::pool pool_;
  gmem::stream_handle stream_;
  bool arena_;
  bool stitch_;
  std::vector<std::uintptr_t> addr_;
};

} // namespace

bool set_gmem_pool_option(const std::string& name, const std::string& value) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (end == value.c_str() || *end != '\0') return false;
  const auto bytes = static_cast<std::size_t>(v < 0 ? 0 : v);
  const bool count = v >= 0 && v == std::floor(v) && v < 1e15; // a whole number of things
  if (name == "grow_slack")
    g_options.grow_slack = v;
  else if (name == "max_cached_bytes")
    g_options.max_cached_bytes = bytes;
  else if (name == "large_segment_bytes")
    g_options.large_segment_bytes = bytes;
  else if (name == "oversize_bytes")
    g_options.oversize_bytes = bytes;
  else if (name == "small_segment_bytes")
    g_options.small_segment_bytes = bytes;
  else if (name == "small_max_bytes" && bytes != 0) // GMEM_SMALL_MAX
    g_options.small_max_bytes = bytes;
  else if (name == "oversize_fraction")
    g_options.oversize_fraction = v;
  else if (name == "oversize_max_waste")
    g_options.oversize_max_waste = v;
  else if (name == "large_segment_max_bytes")
    g_options.large_segment_max_bytes = bytes;
  else if (name == "reuse_safety")
    g_options.reuse_safety = v != 0;
  else if (name == "grow_window_allocs" && count)
    g_options.grow_window_allocs = bytes;
  else if (name == "fence_batch" && count)
    g_options.fence_batch = bytes;
  else if (name == "arena_page_bytes" && bytes != 0 && (bytes & (bytes - 1)) == 0) {
    g_arena_page = bytes;
    g_arena_page_set = true;
  } else if (name == "stitch")
    g_options.stitch = v != 0;
  else if (name == "stitch_keep_ranges" && count)
    g_options.stitch_keep_ranges = bytes;
  else if (name == "stitch_keep_bytes")
    g_options.stitch_keep_bytes = bytes;
  else if (name == "stitch_time_share" && v >= 0)
    g_options.stitch_time_share = v;
  else
    return false;
  g_options_text += (g_options_text.empty() ? "" : " ") + name + "=" + value;
  return true;
}

std::unique_ptr<replay_policy> make_gmem_policy(bool stream_frees, bool arena, bool stitch) {
  return std::make_unique<gmem_policy>(stream_frees, arena, stitch);
}

} // namespace gmem_bench
