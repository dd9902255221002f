// Fakes for the pool's two interfaces and its observer. fake_upstream places segments back to
// back, so a block that crossed a segment boundary would look contiguous; fake_fences lets
// the test decide when fences and barriers succeed and when events complete, and keeps a
// logical clock of fences so the checkers can prove that no block came back early.
#pragma once

#include "pool/pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

namespace gmem::testing {

inline constexpr std::size_t k_mib = std::size_t{1} << 20;

class fake_upstream : public upstream {
public:
  explicit fake_upstream(std::size_t capacity = SIZE_MAX) : capacity_(capacity) {}
  std::uintptr_t map(std::size_t bytes) noexcept override {
    std::lock_guard lock(mu_);
    ++maps;
    if (fail_next > 0) {
      --fail_next;
      return 0;
    }
    if (bytes > capacity_ || mapped_bytes > capacity_ - bytes) return 0;
    std::uintptr_t base = next_;
    next_ += bytes; // back to back: the next segment starts where this one ends
    mapped.emplace(base, bytes);
    mapped_bytes += bytes;
    if (mapped_bytes > peak_mapped_bytes) peak_mapped_bytes = mapped_bytes;
    return base;
  }
  void unmap(std::uintptr_t base, std::size_t bytes) noexcept override {
    std::lock_guard lock(mu_);
    ++unmaps;
    if (base >= k_arena_base) { // any page-aligned range of arena pages, all mapped
      if (page == 0 || base % page != 0 || bytes == 0 || bytes % page != 0 ||
          !covers_locked(base, bytes)) {
        ++bad_unmaps;
        return;
      }
      for (std::uintptr_t p = base; p < base + bytes; p += page)
        if (strict_lending && lent_pages.count(p) != 0) ++bad_unmaps; // a range still maps it
      for (std::uintptr_t p = base; p < base + bytes; p += page)
        arena_pages.erase(p);
      mapped_bytes -= bytes;
      return;
    }
    auto it = mapped.find(base);
    if (it == mapped.end() || it->second != bytes) {
      ++bad_unmaps;
      return;
    }
    mapped.erase(it);
    mapped_bytes -= bytes;
  }
  // Arena (page != 0): pages from k_arena_base up. extend() maps at `at` when those pages are
  // unused, else at place_next (a test's choice, used once), else above the highest page.
  std::size_t arena_page() const noexcept override { return page; }
  std::uintptr_t extend(std::uintptr_t at, std::size_t bytes) noexcept override {
    std::lock_guard lock(mu_);
    ++maps;
    ++extends;
    if (page == 0 || bytes == 0 || bytes % page != 0 || at % page != 0) {
      ++bad_extends;
      return 0;
    }
    if (fail_next > 0) {
      --fail_next;
      return 0;
    }
    if (bytes > capacity_ || mapped_bytes > capacity_ - bytes) return 0;
    std::uintptr_t base = place_next != 0                       ? place_next
                          : at != 0 && unused_locked(at, bytes) ? at
                                                                : top_;
    place_next = 0;
    if (!unused_locked(base, bytes)) {
      ++bad_extends;
      return 0;
    }
    for (std::uintptr_t p = base; p < base + bytes; p += page)
      arena_pages.insert(p);
    top_ = std::max(top_, base + bytes);
    mapped_bytes += bytes;
    if (mapped_bytes > peak_mapped_bytes) peak_mapped_bytes = mapped_bytes;
    return base;
  }
  // Stitching (stitching = true): ranges from k_stitch_base up, never reused. A page must be a
  // mapped arena page, and may be in several ranges (kept ranges map pages that a new range
  // maps too: the pool's is_valid() checks that one serves at a time); with strict_lending,
  // never unmapped from the arena while a range maps it. The pool gives a range back
  // (unstitch) after its lock, so with several threads a freed range's pages may be trimmed
  // before that call: legal for the driver (a page lives until its last mapping goes), so
  // threaded tests turn strict_lending off.
  bool can_stitch() const noexcept override { return stitching; }
  std::uintptr_t stitch(const std::uintptr_t* pages, std::size_t count) noexcept override {
    if (stitch_delay.count() != 0) std::this_thread::sleep_for(stitch_delay);
    std::lock_guard lock(mu_);
    ++stitch_calls;
    if (stitch_fail_next > 0) {
      --stitch_fail_next;
      return 0;
    }
    std::vector<std::uintptr_t> v(pages, pages + count);
    for (std::uintptr_t p : v) {
      if (page == 0 || p % page != 0 || arena_pages.count(p) == 0) ++bad_stitches;
      lent_pages.insert(p);
    }
    const std::uintptr_t base = stitch_next_;
    stitch_next_ += count * page + page; // a hole between ranges
    stitched.emplace(base, std::move(v));
    return base;
  }
  void unstitch(std::uintptr_t base, std::size_t count) noexcept override {
    std::lock_guard lock(mu_);
    auto it = stitched.find(base);
    if (it == stitched.end() || it->second.size() != count) {
      ++bad_stitches;
      return;
    }
    for (std::uintptr_t p : it->second)
      if (auto at = lent_pages.find(p); at != lent_pages.end()) lent_pages.erase(at);
    stitched.erase(it);
    ++unstitch_calls;
  }
  std::vector<std::uintptr_t> stitched_pages(std::uintptr_t base) {
    std::lock_guard lock(mu_);
    auto it = stitched.find(base);
    return it == stitched.end() ? std::vector<std::uintptr_t>{} : it->second;
  }
  std::size_t live_ranges() {
    std::lock_guard lock(mu_);
    return stitched.size();
  }

  bool arena_covers(std::uintptr_t base, std::size_t bytes) {
    std::lock_guard lock(mu_);
    return covers_locked(base, bytes);
  }
  std::size_t arena_runs() { // maximal runs of mapped pages
    std::lock_guard lock(mu_);
    std::size_t runs = 0;
    for (std::uintptr_t p : arena_pages)
      runs += arena_pages.count(p - page) == 0 ? 1 : 0;
    return runs;
  }

  void set_capacity(std::size_t c) {
    std::lock_guard lock(mu_);
    capacity_ = c;
  }
  std::size_t mapped_now() {
    std::lock_guard lock(mu_);
    return mapped_bytes;
  }

  static constexpr std::uintptr_t k_arena_base = std::uintptr_t{1} << 44;
  std::map<std::uintptr_t, std::size_t> mapped;
  std::set<std::uintptr_t> arena_pages;
  std::size_t mapped_bytes = 0, peak_mapped_bytes = 0, maps = 0, unmaps = 0, bad_unmaps = 0;
  std::size_t extends = 0, bad_extends = 0;
  std::size_t page = 0; // arena page; 0 = no arena
  std::uintptr_t place_next = 0;
  int fail_next = 0;
  bool stitching = false;
  int stitch_fail_next = 0;
  std::chrono::microseconds stitch_delay{0}; // host time each stitch() takes
  static constexpr std::uintptr_t k_stitch_base = std::uintptr_t{1} << 43;
  std::map<std::uintptr_t, std::vector<std::uintptr_t>> stitched; // live ranges: base -> pages
  std::multiset<std::uintptr_t> lent_pages;
  bool strict_lending = true;
  std::size_t stitch_calls = 0, unstitch_calls = 0, bad_stitches = 0;

private:
  bool covers_locked(std::uintptr_t base, std::size_t bytes) const {
    for (std::uintptr_t p = base / page * page; p < base + bytes; p += page)
      if (arena_pages.count(p) == 0) return false;
    return true;
  }
  bool unused_locked(std::uintptr_t base, std::size_t bytes) const {
    if (base < k_arena_base || base % page != 0) return false;
    for (std::uintptr_t p = base; p < base + bytes; p += page)
      if (arena_pages.count(p) != 0) return false;
    return true;
  }
  std::uintptr_t top_ = k_arena_base;
  std::uintptr_t stitch_next_ = k_stitch_base;
  std::mutex mu_;
  std::size_t capacity_;
  std::uintptr_t next_ = std::uintptr_t{1} << 32;
};

// Logical clock: every fence start/end and event completion is a tick.
class fake_fences : public fences {
public:
  bool synchronize() noexcept override {
    if (before_synchronize) before_synchronize(); // a test may hold the caller here
    std::lock_guard lock(mu_);
    ++syncs;
    if (!sync_ok) return false;
    std::uint64_t begin = ++clock;
    // A full fence completes every event recorded before it, which is every event so far.
    for (event_handle id : incomplete_)
      events[id].complete = true;
    incomplete_.clear();
    fence_log.push_back({begin, ++clock});
    latest_fence_begin_ = begin;
    return true;
  }
  // A barrier orders all later work after all earlier work, like a fence, but the host did
  // not wait: events recorded before it stay incomplete.
  bool barrier() noexcept override {
    if (before_barrier) before_barrier(); // a test may hold the caller here
    std::lock_guard lock(mu_);
    ++barriers;
    if (!barrier_ok) return false;
    std::uint64_t begin = ++clock;
    fence_log.push_back({begin, ++clock});
    latest_fence_begin_ = begin;
    return true;
  }
  // A mark: an event on the pseudo-stream k_all_streams, complete once the test completes it
  // (or a full fence). A completed mark recorded after a free makes the block safe.
  event_handle mark() noexcept override {
    std::lock_guard lock(mu_);
    ++marks;
    if (!mark_ok) return 0;
    event_handle id = ++next_event_;
    events[id] = event_state{k_all_streams, ++clock, auto_complete};
    if (!auto_complete) incomplete_.insert(id);
    return id;
  }
  event_handle record(stream_handle s) noexcept override {
    if (before_record) before_record(s); // a test may hold the caller here
    // A slow driver call (tests widen race windows with it): the record happens at its end.
    for (int i = 0; i < record_yields.load(std::memory_order_relaxed); ++i)
      std::this_thread::yield();
    std::lock_guard lock(mu_);
    if (!record_ok) return 0;
    event_handle id = ++next_event_;
    events[id] = event_state{s, ++clock, auto_complete};
    if (!auto_complete) incomplete_.insert(id);
    return id;
  }
  bool query(event_handle e) noexcept override {
    std::lock_guard lock(mu_);
    ++queries;
    auto it = events.find(e);
    if (it == events.end() || it->second.released) ++bad_uses;
    return it != events.end() && it->second.complete;
  }
  bool wait(stream_handle s, event_handle e) noexcept override {
    std::lock_guard lock(mu_);
    if (!wait_ok) return false;
    auto it = events.find(e);
    if (it == events.end() || it->second.released) ++bad_uses;
    waits.insert({s, e});
    return true;
  }
  void release(event_handle e) noexcept override {
    std::lock_guard lock(mu_);
    auto it = events.find(e);
    if (it == events.end() || it->second.released)
      ++bad_releases;
    else
      it->second.released = true;
    ++releases;
  }

  // Test controls.
  std::function<void()> before_synchronize;         // set before the pool runs; called without mu_
  std::function<void(stream_handle)> before_record; // likewise
  std::function<void()> before_barrier;             // likewise
  void complete(event_handle e) {
    std::lock_guard lock(mu_);
    // Events on one stream complete in order (as the driver's do): earlier ones too.
    const stream_handle s = events.at(e).stream;
    for (auto it = incomplete_.begin(); it != incomplete_.end() && *it <= e;) {
      if (events[*it].stream == s) {
        events[*it].complete = true;
        it = incomplete_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void complete_all() {
    std::lock_guard lock(mu_);
    for (event_handle id : incomplete_)
      events[id].complete = true;
    incomplete_.clear();
  }
  std::uint64_t now() {
    std::lock_guard lock(mu_);
    return ++clock;
  }
  // Did a fence or a barrier start after `t`, or a mark recorded after `t` complete? (Work
  // issued after the first follows all work before; the second means that work is done.)
  bool fenced_since(std::uint64_t t) {
    std::lock_guard lock(mu_);
    if (latest_fence_begin_locked() > t) return true;
    for (const auto& [id, e] : events)
      if (e.stream == k_all_streams && e.recorded_at > t && e.complete) return true;
    return false;
  }
  bool waited(stream_handle s, event_handle e) {
    std::lock_guard lock(mu_);
    return waits.count({s, e}) != 0;
  }
  // Future work on s waits for e, or for a later event of e's stream (which covers e).
  bool waited_covering(stream_handle s, event_handle e) {
    std::lock_guard lock(mu_);
    auto it = events.find(e);
    if (it == events.end()) return false;
    for (auto w = waits.lower_bound({s, e}); w != waits.end() && w->first == s; ++w)
      if (events[w->second].stream == it->second.stream) return true;
    return false;
  }
  // Sealing (pool_impl::seal_streams) records events after the frees they cover: did an event
  // recorded on `stream` after logical time `t` complete?
  bool completed_since(stream_handle stream, std::uint64_t t) {
    std::lock_guard lock(mu_);
    for (const auto& [id, e] : events)
      if (e.stream == stream && e.recorded_at > t && e.complete) return true;
    return false;
  }
  // Does future work on `s` wait for an event recorded on `stream` after `t`?
  bool waited_since(stream_handle s, stream_handle stream, std::uint64_t t) {
    std::lock_guard lock(mu_);
    for (auto w = waits.lower_bound({s, 0}); w != waits.end() && w->first == s; ++w) {
      const event_state& e = events[w->second];
      if (e.stream == stream && e.recorded_at > t) return true;
    }
    return false;
  }
  std::size_t records_on(stream_handle s) {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (const auto& [id, e] : events)
      n += e.stream == s ? 1 : 0;
    return n;
  }
  bool is_complete(event_handle e) {
    std::lock_guard lock(mu_);
    auto it = events.find(e);
    return it != events.end() && it->second.complete;
  }
  event_handle last_event() {
    std::lock_guard lock(mu_);
    return next_event_;
  }
  std::size_t live_events() {
    std::lock_guard lock(mu_);
    std::size_t n = 0;
    for (auto& [id, e] : events)
      n += e.released ? 0 : 1;
    return n;
  }

  struct event_state {
    stream_handle stream = 0;
    std::uint64_t recorded_at = 0;
    bool complete = false;
    bool released = false;
  };
  static constexpr stream_handle k_all_streams = ~stream_handle{0} - 1; // marks' pseudo-stream
  bool sync_ok = true, record_ok = true, wait_ok = true, auto_complete = false, barrier_ok = true,
       mark_ok = true;
  std::atomic<int> record_yields{0};
  std::map<event_handle, event_state> events;
  std::set<std::pair<stream_handle, event_handle>> waits;
  std::vector<std::pair<std::uint64_t, std::uint64_t>> fence_log;
  std::size_t syncs = 0, barriers = 0, marks = 0, queries = 0, releases = 0, bad_releases = 0,
              bad_uses = 0;
  std::uint64_t clock = 0;

  // A completed fence the program made itself (the test logs it like the pool's own).
  void log_external_fence(std::uint64_t begin) {
    std::lock_guard lock(mu_);
    fence_log.push_back({begin, ++clock});
    if (begin > latest_fence_begin_) latest_fence_begin_ = begin;
  }

private:
  std::uint64_t latest_fence_begin_locked() const { return latest_fence_begin_; }
  std::mutex mu_;
  std::set<event_handle> incomplete_;
  event_handle next_event_ = 0;
  std::uint64_t latest_fence_begin_ = 0;
};

// Holds the first caller of a fake's hook (before_barrier, before_synchronize) until open():
// `fe.before_barrier = [&] { gate.pass(); }`; calls() counts every caller.
class first_call_gate {
public:
  void pass() {
    if (calls_.fetch_add(1) == 0)
      while (!open_.load())
        std::this_thread::yield();
  }
  void open() { open_.store(true); }
  int calls() const { return calls_.load(); }

private:
  std::atomic<int> calls_{0};
  std::atomic<bool> open_{false};
};

// Completes random recorded events until `done`, as the GPU would (hazard tests).
class event_completer {
public:
  event_completer(fake_fences& fe, std::uint64_t seed)
      : thread_([this, &fe, seed] {
          std::mt19937_64 rng(seed);
          while (!done_.load()) {
            const event_handle last = fe.last_event();
            if (last != 0) fe.complete(1 + rng() % last);
            std::this_thread::yield();
          }
        }) {}
  ~event_completer() { stop(); }
  void stop() {
    done_ = true;
    if (thread_.joinable()) thread_.join();
  }

private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Options holding a pool to one small segment (the limit stops growth), and that segment
// filled with blocks of `block` bytes allocated on s: what comes next needs a block freed
// earlier.
inline pool_options one_segment_options() {
  pool_options o;
  o.limit_bytes = o.small_segment_bytes;
  return o;
}
inline std::vector<std::uintptr_t> fill_segment(pool& p, std::size_t block, stream_handle s) {
  std::vector<std::uintptr_t> blocks;
  for (std::size_t i = 0; i < p.options().small_segment_bytes / block; ++i)
    blocks.push_back(p.allocate(block, s).address);
  return blocks;
}

struct recording_observer : pool_observer {
  void on_segment_map(std::uintptr_t, std::size_t b) noexcept override {
    map_bytes += b;
    ++maps;
  }
  void on_segment_unmap(std::uintptr_t, std::size_t b) noexcept override {
    unmap_bytes += b;
    ++unmaps;
  }
  void on_fence(std::uint64_t, std::size_t released) noexcept override {
    ++fences;
    fence_released += released;
  }
  void on_trim(std::size_t released) noexcept override { trimmed += released; }
  void on_oom(std::size_t requested) noexcept override {
    ++ooms;
    last_oom = requested;
  }
  void on_stitch(std::uintptr_t, std::size_t b) noexcept override {
    ++stitches;
    stitch_bytes += b;
  }
  void on_unstitch(std::uintptr_t, std::size_t b) noexcept override {
    ++unstitches;
    unstitch_bytes += b;
  }
  std::size_t stitches = 0, unstitches = 0, stitch_bytes = 0, unstitch_bytes = 0;
  std::size_t map_bytes = 0, unmap_bytes = 0, maps = 0, unmaps = 0, fences = 0, fence_released = 0,
              trimmed = 0, ooms = 0, last_oom = 0;
};

} // namespace gmem::testing
