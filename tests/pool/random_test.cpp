// A long random run against a simple reference model. After every step: no two live blocks
// overlap, every live block lies inside one mapped segment, blocks are 512-aligned, the stats
// equal the model's, is_valid() holds, and no block came back before a fence, event,
// dependency or stream sync made it safe for its new stream (docs/design.md "Reuse safety").
#include "pool/pool.h"
#include "tests/pool/fakes.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace gmem::testing {
namespace {

#if defined(GMEM_DEBUG)
constexpr int k_ops = 4'000; // -O0, and is_valid() after every mutation inside the pool
#elif defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int k_ops = 20'000; // sanitizers are 5-20x slower; the plain run does 100,000+
#else
constexpr int k_ops = 120'000;
#endif

constexpr stream_handle k_streams[] = {k_no_stream, 0, 0x10, 0x20};

struct live_block {
  std::size_t size, requested;
  stream_handle stream;
};
// A freed range whose old work may still run: who freed it, and when.
struct hazard {
  std::size_t size;
  stream_handle stream; // k_no_stream: a pending (stream-less) free
  std::uint64_t freed_at;
};

class model_run {
public:
  model_run(std::uint64_t seed, pool_options o, std::size_t arena_page = 0) : rng_(seed), opts_(o) {
    up_.page = arena_page;
    p_ = std::make_unique<pool>(up_, fe_, opts_);
  }

  void step() {
    int op = static_cast<int>(rng_() % 100);
    if ((op < 45 && live_.size() < 300) || live_.empty()) {
      allocate();
    } else if (op < 88) {
      free_random();
    } else if (op < 91) {
      external_fence();
    } else if (op < 93) {
      stream_sync();
    } else if (op < 95) {
      complete_some_event();
    } else if (op < 96) {
      fe_.sync_ok = rng_() % 4 != 0;    // fences fail now and then
      fe_.barrier_ok = rng_() % 3 != 0; // barriers too (only used with pool_options::barriers)
    } else if (op < 97) {
      p_->trim(rng_() % 2 ? 0 : 64 * k_mib);
    } else if (op < 98) {
      bad_free();
    } else {
      p_->set_limit(rng_() % 3 == 0 ? 0 : (256 + rng_() % 512) * k_mib);
    }
    check();
  }

  std::size_t ooms = 0, allocs = 0;
  fake_fences fe_;
  fake_upstream up_;
  std::unique_ptr<pool> p_;

private:
  std::size_t random_size() {
    // Log-uniform 1 B .. 8 MiB (1 in 32: up to 48 MiB), with exact repeats now and then.
    if (!recent_.empty() && rng_() % 4 == 0) return recent_[rng_() % recent_.size()];
    double top = rng_() % 32 == 0 ? 48.0 * k_mib : 8.0 * k_mib;
    double l = std::uniform_real_distribution<double>(0, std::log(top))(rng_);
    std::size_t n = static_cast<std::size_t>(std::exp(l));
    if (recent_.size() < 32) recent_.push_back(n);
    return n;
  }

  void allocate() {
    std::size_t n = random_size();
    stream_handle s = k_streams[rng_() % 4];
    alloc_result r = p_->allocate(n, s);
    if (r.status != pool_status::ok) {
      ASSERT_EQ(r.status, pool_status::out_of_memory);
      ++ooms;
      return;
    }
    ++allocs;
    ASSERT_EQ(r.address % 512, 0u);
    ASSERT_GE(r.size, n);
    ASSERT_EQ(r.size % 512, 0u);
    // No overlap with live blocks.
    auto next = live_.lower_bound(r.address);
    if (next != live_.end()) {
      ASSERT_LE(r.address + r.size, next->first);
    }
    if (next != live_.begin()) {
      auto prev = std::prev(next);
      ASSERT_LE(prev->first + prev->second.size, r.address);
    }
    // Inside exactly one mapped segment, or mapped arena pages.
    if (r.address >= fake_upstream::k_arena_base) {
      ASSERT_TRUE(up_.arena_covers(r.address, r.size));
      ASSERT_GT(n, opts_.small_max_bytes); // small requests never come from the arena
    } else {
      ASSERT_TRUE(up_.page == 0 || n <= opts_.small_max_bytes);
    }
    auto seg = up_.mapped.upper_bound(r.address);
    if (r.address < fake_upstream::k_arena_base) {
      ASSERT_NE(seg, up_.mapped.begin());
      --seg;
      ASSERT_LE(r.address + r.size, seg->first + seg->second);
    }
    check_hazards(r.address, r.size, s);
    live_[r.address] = live_block{r.size, n, s};
    live_bytes_ += r.size;
    requested_ += n;
    ++total_allocs_;
  }

  void free_random() {
    auto it = live_.begin();
    std::advance(it, static_cast<long>(rng_() % live_.size()));
    stream_handle s = k_streams[rng_() % 4];
    std::uint64_t t = fe_.now();
    ASSERT_EQ(p_->deallocate(it->first, s), pool_status::ok);
    hazards_[it->first] = hazard{it->second.size, s, t};
    live_bytes_ -= it->second.size;
    requested_ -= it->second.requested;
    ++total_frees_;
    live_.erase(it);
  }

  void bad_free() {
    if (live_.empty()) return;
    auto it = live_.begin();
    std::advance(it, static_cast<long>(rng_() % live_.size()));
    if (it->second.size > 512) {
      ASSERT_EQ(p_->deallocate(it->first + 512), pool_status::invalid);
    }
    ASSERT_EQ(p_->deallocate(0x1000), pool_status::not_owned);
  }

  void external_fence() {
    if (open_fence_ == 0) {
      open_fence_ = p_->begin_external_fence();
      open_fence_clock_ = fe_.now(); // the program's synchronize starts after begin
    } else {
      fe_.log_external_fence(open_fence_clock_);
      p_->end_external_fence(open_fence_);
      open_fence_ = 0;
    }
  }

  void stream_sync() {
    stream_handle s = k_streams[1 + rng_() % 3];
    std::uint64_t ticket = p_->begin_stream_sync();
    std::uint64_t begin = fe_.now();
    p_->end_stream_sync(s, ticket);
    stream_syncs_[s] = begin; // the latest is all that matters
  }

  void complete_some_event() {
    event_handle last = fe_.last_event();
    if (last != 0) fe_.complete(1 + rng_() % last);
  }

  // Old work on [address, address + size) may still run: is the new owner on `s` safe?
  void check_hazards(std::uintptr_t address, std::size_t size, stream_handle s) {
    auto it = hazards_.lower_bound(address);
    if (it != hazards_.begin()) --it;
    while (it != hazards_.end() && it->first < address + size) {
      const hazard h = it->second;
      std::uintptr_t h_end = it->first + h.size;
      if (h_end <= address) {
        ++it;
        continue;
      }
      bool safe = fe_.fenced_since(h.freed_at);
      if (h.stream != k_no_stream) {
        // An event recorded on the freeing stream after the free covers it (the pool records
        // them when it seals a stream, never at the free).
        safe = safe || h.stream == s || fe_.completed_since(h.stream, h.freed_at) ||
               (s != k_no_stream && fe_.waited_since(s, h.stream, h.freed_at));
        for (auto [ss, begin] : stream_syncs_)
          safe = safe || (ss == h.stream && begin > h.freed_at);
      }
      ASSERT_TRUE(safe) << "block " << address << " handed out on stream " << s
                        << " before the free on stream " << h.stream << " was safe";
      // The new owner's work now follows the old; keep the parts outside the new block.
      std::uintptr_t h_start = it->first;
      it = hazards_.erase(it);
      if (h_start < address) hazards_[h_start] = hazard{address - h_start, h.stream, h.freed_at};
      if (h_end > address + size)
        hazards_[address + size] = hazard{h_end - address - size, h.stream, h.freed_at};
    }
  }

  void check() {
    pool_stats s = p_->stats();
    ASSERT_EQ(s.live_bytes, live_bytes_);
    ASSERT_EQ(s.live_requested_bytes, requested_);
    ASSERT_EQ(s.live_blocks, live_.size());
    ASSERT_EQ(s.total_allocs, total_allocs_);
    ASSERT_EQ(s.total_frees, total_frees_);
    ASSERT_EQ(s.reserved_bytes, up_.mapped_bytes);
    ASSERT_EQ(s.segments, up_.mapped.size() + up_.arena_runs());
    ASSERT_EQ(up_.bad_extends, 0u);
    ASSERT_GE(s.peak_reserved_bytes, s.reserved_bytes);
    // Never grows beyond the limit (a lowered limit cannot unmap live blocks).
    if (s.limit_bytes != 0) {
      ASSERT_LE(up_.mapped_bytes, std::max<std::size_t>(s.limit_bytes, mapped_before_));
    }
    mapped_before_ = up_.mapped_bytes;
    ASSERT_LE(s.largest_free_block, s.free_bytes);
    ASSERT_EQ(up_.bad_unmaps, 0u);
    ASSERT_EQ(fe_.bad_releases + fe_.bad_uses, 0u);
    ASSERT_TRUE(p_->is_valid());
  }

  std::mt19937_64 rng_;
  pool_options opts_;
  std::map<std::uintptr_t, live_block> live_;
  std::map<std::uintptr_t, hazard> hazards_;
  std::map<stream_handle, std::uint64_t> stream_syncs_; // latest begin per stream
  std::vector<std::size_t> recent_;
  std::size_t live_bytes_ = 0, requested_ = 0, total_allocs_ = 0, total_frees_ = 0;
  std::uint64_t open_fence_ = 0, open_fence_clock_ = 0;
  std::size_t mapped_before_ = 0;
};

void run(std::uint64_t seed, pool_options o, int ops, std::size_t arena_page = 0) {
  model_run m(seed, o, arena_page);
  for (int i = 0; i < ops; ++i) {
    m.step();
    if (::testing::Test::HasFatalFailure()) {
      ADD_FAILURE() << "seed " << seed << ", step " << i;
      return;
    }
  }
  EXPECT_GT(m.allocs, static_cast<std::size_t>(ops) / 4);
}

TEST(random_test, default_policy) {
  run(1, pool_options{}, k_ops);
}

TEST(random_test, small_segments_and_no_growth_release) {
  pool_options o;
  o.small_segment_bytes = 1 << 20;
  o.small_max_bytes = 256 << 10;
  o.large_segment_bytes = 8 << 20;
  o.oversize_bytes = 4 << 20;
  o.large_split_min_bytes = 512;
  o.grow_slack = -1;
  run(2, o, k_ops / 2);
}

TEST(random_test, barriers) {
  pool_options o;
  o.barriers = true;
  model_run m(4, o);
  for (int i = 0; i < k_ops / 2 && !::testing::Test::HasFatalFailure(); ++i)
    m.step();
  EXPECT_GT(m.fe_.barriers, 0u); // the pool took the barrier path, and the checks held
}

TEST(random_test, tight_cache_cap) {
  pool_options o;
  o.max_cached_bytes = 32 * k_mib;
  o.warmup_bytes = 64 * k_mib;
  run(3, o, k_ops / 2);
}

TEST(random_test, arena) {
  pool_options o;
  o.arena = true;
  model_run m(5, o, 2 * k_mib);
  for (int i = 0; i < k_ops / 2 && !::testing::Test::HasFatalFailure(); ++i)
    m.step();
  // The arena grew, and trims cut pages out of it (the checks above held throughout).
  EXPECT_GT(m.up_.extends, 10u);
  EXPECT_GT(m.p_->stats().segment_unmaps, 2u);
}

TEST(random_test, arena_barriers_and_cache_cap) {
  pool_options o;
  o.arena = true;
  o.barriers = true;
  o.max_cached_bytes = 48 * k_mib;
  o.warmup_bytes = 40 * k_mib;
  run(6, o, k_ops / 2, 4 * k_mib);
}

} // namespace
} // namespace gmem::testing
