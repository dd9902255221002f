// OOM-safe chunked processing over the gmem C API, header-only.
//
//   auto plan = gmem::plan_chunks(n, bytes_per_item);          // 0.7 of what is allocatable
//   auto res = gmem::for_each_chunk(n, plan, [&](size_t b, size_t e) { return work(b, e); });
//   if (!res) std::fprintf(stderr, "%s\n", res.message.c_str());
//
// for_each_chunk calls fn(begin, end) on consecutive ranges covering [0, n) exactly once
// each (a range that ran out of memory is retried, so fn must leave no partial effect on
// failure). On out of memory it empties gmem's cache, halves the chunk and retries the same
// range; after `grow_after` consecutive successes it doubles the chunk back toward the plan.
// for_each_batch does the same over an input iterator of unknown length, holding at most
// one chunk of items. See docs/api.md.
//
// C++17 or later (nvcc's default dialect included). Batches are passed as gmem::span<const T>:
// std::span where the library has it (C++20), else a minimal view with the same members
// (data, size, empty, operator[], begin, end, front, back).
#pragma once

#include "gmem/gmem.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <iterator>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>
#if __cplusplus >= 202002L && __has_include(<span>)
#include <span>
#endif

namespace gmem {

#if defined(__cpp_lib_span) && __cpp_lib_span >= 202002L
template <class T> using span = std::span<T>;
#else
// A read-only view of contiguous items, the subset of std::span that batches need.
template <class T> class span {
public:
  using element_type = T;
  using value_type = std::remove_cv_t<T>;
  using size_type = std::size_t;
  using iterator = T*;
  span() noexcept = default;
  span(T* data, std::size_t size) noexcept : data_(data), size_(size) {}
  T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T& front() const noexcept { return data_[0]; }
  T& back() const noexcept { return data_[size_ - 1]; }
  T* begin() const noexcept { return data_; }
  T* end() const noexcept { return data_ + size_; }

private:
  T* data_ = nullptr;
  std::size_t size_ = 0;
};
#endif

// CUDA_ERROR_OUT_OF_MEMORY (driver) and cudaErrorMemoryAllocation (runtime) are both 2.
inline constexpr int k_cuda_out_of_memory = 2;

// Throw this (or return an OOM code) from a chunk function to ask for a smaller chunk.
class out_of_memory : public std::bad_alloc {
public:
  const char* what() const noexcept override { return "gmem: out of memory"; }
};

struct chunk_options {
  double safety_fraction = 0.7;      // share of the allocatable bytes a chunk may use
  std::size_t min_chunk_items = 1;   // never plan or retry below this many items
  std::size_t max_chunk_items = 0;   // 0 = no maximum
  std::uint64_t fixed_bytes = 0;     // per-chunk memory independent of its size (workspace)
  int device = -1;                   // as in gmem.h
  std::uint64_t available_bytes = 0; // 0 = ask gmem_allocatable_bytes(device)
};

struct chunk_plan {
  std::size_t total_items = 0;
  std::size_t chunk_items = 0;      // items per chunk; chunks are balanced, the last may be less
  std::size_t chunk_count = 0;      // ceil(total_items / chunk_items)
  std::size_t last_chunk_items = 0; // total_items - (chunk_count - 1) * chunk_items
  std::size_t min_chunk_items = 1;
  std::uint64_t bytes_per_item = 0;
  std::uint64_t bytes_per_chunk = 0; // fixed_bytes + chunk_items * bytes_per_item
  std::uint64_t available_bytes = 0; // what the budget was taken from
  std::uint64_t budget_bytes = 0;    // available_bytes * safety_fraction
  // false: even min_chunk_items exceeds the budget, or availability is unknown (status);
  // the plan then uses min_chunk_items (or, unknown, max_chunk_items / everything) and
  // leaves the rest to for_each_chunk's retries.
  bool fits = true;
  gmem_status status = GMEM_OK; // of the availability query
};

// Plans chunks so that one chunk needs at most safety_fraction of the allocatable memory.
inline chunk_plan plan_chunks(std::size_t total_items, std::uint64_t bytes_per_item,
                              const chunk_options& o = {}) {
  chunk_plan p;
  p.total_items = total_items;
  p.bytes_per_item = bytes_per_item;
  p.min_chunk_items = std::max<std::size_t>(o.min_chunk_items, 1);
  p.available_bytes = o.available_bytes;
  if (p.available_bytes == 0) p.status = gmem_allocatable_bytes(o.device, &p.available_bytes);
  const double fraction = std::clamp(o.safety_fraction, 0.0, 1.0);
  p.budget_bytes = static_cast<std::uint64_t>(static_cast<double>(p.available_bytes) * fraction);
  std::size_t chunk = total_items;
  if (p.status != GMEM_OK) {
    p.fits = false;
  } else if (p.budget_bytes < o.fixed_bytes + p.min_chunk_items * bytes_per_item) {
    p.fits = false;
    chunk = p.min_chunk_items;
  } else if (bytes_per_item != 0) {
    chunk = static_cast<std::size_t>(
        std::min<std::uint64_t>((p.budget_bytes - o.fixed_bytes) / bytes_per_item, total_items));
  }
  if (o.max_chunk_items != 0)
    chunk = std::min(chunk, std::max(o.max_chunk_items, p.min_chunk_items));
  chunk = std::max(chunk, p.min_chunk_items);
  if (total_items == 0) return p;
  chunk = std::min(chunk, total_items);
  p.chunk_count = (total_items + chunk - 1) / chunk;
  // Same number of chunks, evened out: less memory per chunk, no runt at the end.
  p.chunk_items = std::max((total_items + p.chunk_count - 1) / p.chunk_count, p.min_chunk_items);
  p.chunk_items = std::min(p.chunk_items, total_items);
  p.chunk_count = (total_items + p.chunk_items - 1) / p.chunk_items;
  p.last_chunk_items = total_items - (p.chunk_count - 1) * p.chunk_items;
  p.bytes_per_chunk = o.fixed_bytes + p.chunk_items * bytes_per_item;
  return p;
}

struct chunk_progress {
  std::size_t items_done = 0;     // items of completed chunks
  std::size_t total_items = 0;    // 0 when unknown (for_each_batch)
  std::size_t begin = 0, end = 0; // the chunk just completed
  std::size_t chunk_items = 0;    // the current chunk size after this step
  std::size_t ooms = 0;           // out-of-memory results so far
};

struct retry_options {
  unsigned max_halvings = 24;      // consecutive halvings without a success before giving up
  unsigned grow_after = 4;         // consecutive successes before doubling back toward the plan
  unsigned retries_at_minimum = 1; // retries (after emptying the cache) at min_chunk_items
  bool empty_cache_on_oom = true;
  std::function<bool(long long)> is_oom_code;                      // default: == 2
  std::function<bool(const std::exception_ptr&)> is_oom_exception; // default: see below
  std::function<void()> empty_cache;                               // default: gmem_empty_cache
  std::function<void(const chunk_progress&)> on_progress;
};

enum class chunk_error {
  none,
  out_of_memory_at_minimum, // a chunk of min_chunk_items items still ran out of memory
  too_many_halvings,        // max_halvings consecutive halvings without a success
  failed,                   // fn returned a non-OOM error code (code)
};

struct chunk_result {
  chunk_error error = chunk_error::none;
  long long code = 0; // fn's last non-zero return value
  std::size_t items_done = 0;
  std::size_t chunks_run = 0; // successful calls
  std::size_t ooms = 0, halvings = 0, growths = 0;
  std::size_t failed_begin = 0, failed_end = 0; // the range that failed, when error != none
  std::string message;                          // one line naming the range and the cause
  std::uint64_t bytes_per_item = 0;             // for_each_batch: the last per-item cost estimate
  bool ok() const { return error == chunk_error::none; }
  explicit operator bool() const { return ok(); }
};

// Default OOM test for exceptions: gmem::out_of_memory, std::bad_alloc, and any
// std::exception whose message says "out of memory" (c10::OutOfMemoryError, thrust).
inline bool default_is_oom_exception(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    return true;
  } catch (const std::exception& x) {
    return std::strstr(x.what(), "out of memory") != nullptr;
  } catch (...) {
    return false;
  }
}

namespace detail {

enum class outcome { ok, oom, failed };

// The adaptive chunk size and its retry state; shared by for_each_chunk and for_each_batch
// (where it persists across buffers). Invariant: min_ <= size_ <= target_ (target_ >= min_).
class adaptive_runner {
public:
  adaptive_runner(std::size_t target, std::size_t min, std::size_t total, const retry_options& o,
                  chunk_result& r)
      : min_(std::max<std::size_t>(min, 1)), target_(std::max(target, min_)), size_(target_),
        total_(total), o_(o), r_(r) {}

  void set_target(std::size_t target) {
    target_ = std::max(target, min_);
    size_ = std::min(size_, target_);
  }
  std::size_t size() const { return size_; }

  // Processes [begin, end) with invoke(b, e, &code) -> outcome. False when it gave up (r_ says
  // why); exceptions other than OOM ones leave through here unchanged.
  template <class Invoke> bool run(std::size_t begin, std::size_t end, Invoke&& invoke) {
    std::size_t b = begin;
    while (b < end) {
      const std::size_t e = b + std::min(size_, end - b);
      long long code = 0;
      const outcome out = invoke(b, e, code);
      if (out == outcome::ok) {
        r_.items_done += e - b;
        ++r_.chunks_run;
        ++successes_;
        halvings_in_row_ = 0;
        min_retries_ = 0;
        if (size_ < target_ && successes_ >= o_.grow_after) {
          size_ = std::min(size_ * 2, target_);
          successes_ = 0;
          ++r_.growths;
        }
        if (o_.on_progress) o_.on_progress({r_.items_done, total_, b, e, size_, r_.ooms});
        b = e;
        continue;
      }
      r_.failed_begin = b;
      r_.failed_end = e;
      if (out == outcome::failed) {
        r_.error = chunk_error::failed;
        r_.code = code;
        r_.message = "gmem: chunk [" + std::to_string(b) + ", " + std::to_string(e) +
                     ") failed with error code " + std::to_string(code) + "; stopped after " +
                     std::to_string(r_.items_done) + " items";
        return false;
      }
      ++r_.ooms;
      successes_ = 0;
      if (code != 0) r_.code = code;
      if (e - b <= min_ && min_retries_ < o_.retries_at_minimum) {
        ++min_retries_;
        empty_cache();
        continue;
      }
      if (e - b <= min_) {
        r_.error = chunk_error::out_of_memory_at_minimum;
        r_.message = "gmem: chunk [" + std::to_string(b) + ", " + std::to_string(e) +
                     ") ran out of memory at the minimum chunk size " + std::to_string(min_) +
                     " after emptying the cache and " + std::to_string(min_retries_) +
                     " retries; stopped after " + std::to_string(r_.items_done) + " items";
        return false;
      }
      if (halvings_in_row_ >= o_.max_halvings) {
        r_.error = chunk_error::too_many_halvings;
        r_.message = "gmem: chunk [" + std::to_string(b) + ", " + std::to_string(e) +
                     ") still ran out of memory after " + std::to_string(halvings_in_row_) +
                     " halvings in a row (max_halvings); stopped after " +
                     std::to_string(r_.items_done) + " items";
        return false;
      }
      empty_cache();
      size_ = std::max(min_, (e - b) / 2);
      ++halvings_in_row_;
      ++r_.halvings;
    }
    return true;
  }

private:
  void empty_cache() {
    if (!o_.empty_cache_on_oom) return;
    if (o_.empty_cache)
      o_.empty_cache();
    else
      gmem_empty_cache();
  }

  std::size_t min_, target_, size_, total_;
  const retry_options& o_;
  chunk_result& r_;
  std::size_t successes_ = 0;
  unsigned halvings_in_row_ = 0;
  unsigned min_retries_ = 0;
};

// Calls fn(args...) and classifies the result: void -> ok; an integral or enum value -> 0 ok,
// OOM code -> oom, else failed; a bool -> true ok, false failed; OOM exceptions -> oom.
template <class Fn, class... Args>
outcome invoke_classified(const retry_options& o, long long& code, Fn& fn, Args&&... args) {
  using ret = std::invoke_result_t<Fn&, Args...>;
  try {
    if constexpr (std::is_void_v<ret>) {
      std::invoke(fn, std::forward<Args>(args)...);
      return outcome::ok;
    } else if constexpr (std::is_same_v<ret, bool>) {
      return std::invoke(fn, std::forward<Args>(args)...) ? outcome::ok : outcome::failed;
    } else {
      static_assert(std::is_integral_v<ret> || std::is_enum_v<ret>,
                    "chunk function must return void, bool, or an integer/enum error code");
      code = static_cast<long long>(std::invoke(fn, std::forward<Args>(args)...));
      if (code == 0) return outcome::ok;
      const bool oom = o.is_oom_code ? o.is_oom_code(code) : code == k_cuda_out_of_memory;
      return oom ? outcome::oom : outcome::failed;
    }
  } catch (...) {
    const std::exception_ptr e = std::current_exception();
    if (o.is_oom_exception ? o.is_oom_exception(e) : default_is_oom_exception(e))
      return outcome::oom;
    throw;
  }
}

} // namespace detail

// Runs fn(begin, end) over [0, total_items) in chunks of plan.chunk_items, adapting on OOM.
template <class Fn>
chunk_result for_each_chunk(std::size_t total_items, const chunk_plan& plan, Fn&& fn,
                            const retry_options& o = {}) {
  chunk_result r;
  if (total_items == 0) return r;
  const std::size_t target = plan.chunk_items != 0 ? plan.chunk_items : total_items;
  detail::adaptive_runner runner(target, plan.min_chunk_items, total_items, o, r);
  runner.run(0, total_items, [&](std::size_t b, std::size_t e, long long& code) {
    return detail::invoke_classified(o, code, fn, b, e);
  });
  return r;
}

struct stream_options {
  std::size_t sample_items = 32; // items read before the first plan to estimate their cost
  // Host-side cap on one batch, whatever the device could take (0 = none: with tiny items and
  // a large device, one batch could then hold the whole input).
  std::size_t max_batch_items = std::size_t{1} << 16;
  // For gmem::measured: reads (live bytes, peak live bytes) of the device and resets the
  // peak. Defaults: gmem_stats(co.device) and gmem_reset_peak() (which need the shim).
  std::function<bool(std::uint64_t& live, std::uint64_t& peak)> read_usage;
  std::function<bool()> reset_peak;
};

// Pass as item_bytes to have for_each_batch measure the cost instead of being told it.
struct measured_cost {
  explicit measured_cost() = default;
};
inline constexpr measured_cost measured{};

namespace detail {

// The streaming loop. buf may already hold items (absolute index base); results accumulate
// in r. Returns false when it gave up.
template <class T, class InputIt, class Sentinel, class ItemBytes, class Fn>
bool batch_stream(InputIt& first, Sentinel& last, ItemBytes& item_bytes, Fn& fn,
                  const chunk_options& co, const retry_options& o, const stream_options& so,
                  std::vector<T>& buf, std::size_t base, std::uint64_t per_item, chunk_result& r) {
  auto take = [&](std::size_t want) {
    while (buf.size() < want && !(first == last)) {
      buf.push_back(*first);
      ++first;
      per_item = std::max<std::uint64_t>(per_item, item_bytes(buf.back()));
    }
  };
  auto replan = [&] {
    r.bytes_per_item = per_item;
    return plan_chunks(std::max<std::size_t>(buf.size(), 1), per_item, co);
  };
  take(std::max<std::size_t>(so.sample_items, 1));
  if (buf.empty()) return true;
  auto target_of = [&](const chunk_plan& p) {
    if (!p.fits && p.status != GMEM_OK) // availability unknown: one sample-sized chunk
      return co.max_chunk_items != 0 ? co.max_chunk_items : buf.size();
    // plan_chunks caps at the items it was shown; ask what the budget allows instead.
    std::size_t t =
        p.bytes_per_item == 0
            ? buf.size()
            : static_cast<std::size_t>(
                  (p.budget_bytes > co.fixed_bytes ? p.budget_bytes - co.fixed_bytes : 0) /
                  p.bytes_per_item);
    if (co.max_chunk_items != 0) t = std::min(t, co.max_chunk_items);
    if (so.max_batch_items != 0) t = std::min(t, so.max_batch_items);
    return std::max(t, p.min_chunk_items);
  };
  adaptive_runner runner(target_of(replan()), co.min_chunk_items, 0, o, r);
  for (;;) {
    take(std::max(runner.size(), buf.size()));
    if (buf.empty()) break;
    runner.set_target(target_of(replan())); // the estimate now covers the items just read
    const std::size_t n = std::min(buf.size(), runner.size());
    const bool ok = runner.run(base, base + n, [&](std::size_t b, std::size_t e, long long& code) {
      const span<const T> items(buf.data() + (b - base), e - b);
      return invoke_classified(o, code, fn, items, b);
    });
    if (!ok) return false;
    buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(n));
    base += n;
  }
  return true;
}

} // namespace detail

// Streaming: reads items from [first, last) (an input iterator; the length may be unknown),
// estimates the device bytes per item as the largest item_bytes(item) seen so far (first
// from a sample of sample_items items, then re-planned before each buffer), and calls
// fn(gmem::span<const T> items, std::size_t first_index) on consecutive batches, adapting on
// OOM like for_each_chunk. At most one planned chunk of items is held in memory.
template <
    class InputIt, class Sentinel, class ItemBytes, class Fn,
    std::enable_if_t<
        std::is_invocable_v<ItemBytes&, const typename std::iterator_traits<InputIt>::value_type&>,
        int> = 0>
chunk_result for_each_batch(InputIt first, Sentinel last, ItemBytes&& item_bytes, Fn&& fn,
                            const chunk_options& co = {}, const retry_options& o = {},
                            const stream_options& so = {}) {
  using value_type = typename std::iterator_traits<InputIt>::value_type;
  chunk_result r;
  std::vector<value_type> buf;
  detail::batch_stream(first, last, item_bytes, fn, co, o, so, buf, 0, 0, r);
  return r;
}

// Measured cost: resets the pool's peaks (gmem_reset_peak), runs the first sample_items
// items as one batch (halving on OOM like the
// rest), takes the peak live bytes it added per item of its widest successful chunk as the
// cost of every item, then streams the rest as above. Measuring needs the shim (or
// so.read_usage); without it the cost stays 0 and batches stay sample-sized, guarded only by
// the OOM retries.
template <class InputIt, class Sentinel, class Fn>
chunk_result for_each_batch(InputIt first, Sentinel last, measured_cost, Fn&& fn,
                            const chunk_options& co = {}, const retry_options& o = {},
                            const stream_options& so = {}) {
  using value_type = typename std::iterator_traits<InputIt>::value_type;
  chunk_result r;
  std::vector<value_type> sample;
  while (sample.size() < std::max<std::size_t>(so.sample_items, 1) && !(first == last)) {
    sample.push_back(*first);
    ++first;
  }
  if (sample.empty()) return r;
  auto read = [&](std::uint64_t& live, std::uint64_t& peak) {
    if (so.read_usage) return so.read_usage(live, peak);
    gmem_stats_t st{};
    st.struct_size = sizeof st;
    if (gmem_stats(co.device, &st) != GMEM_OK || (st.flags & GMEM_STATS_FROM_POOL) == 0)
      return false;
    live = st.live_bytes;
    peak = st.peak_live_bytes;
    return true;
  };
  std::uint64_t live0 = 0, peak = 0;
  const bool reset = so.reset_peak ? so.reset_peak() : gmem_reset_peak() == GMEM_OK;
  const bool can_measure = reset && read(live0, peak);
  std::size_t widest = 0;
  detail::adaptive_runner runner(sample.size(), co.min_chunk_items, 0, o, r);
  const bool ok = runner.run(0, sample.size(), [&](std::size_t b, std::size_t e, long long& code) {
    const span<const value_type> items(sample.data() + b, e - b);
    const detail::outcome out = detail::invoke_classified(o, code, fn, items, b);
    if (out == detail::outcome::ok) widest = std::max(widest, e - b);
    return out;
  });
  if (!ok) return r;
  std::uint64_t per_item = 0, live1 = 0;
  if (can_measure && widest != 0 && read(live1, peak) && peak > live0)
    per_item = (peak - live0 + widest - 1) / widest;
  auto cost = [per_item](const value_type&) { return per_item; };
  std::vector<value_type> buf;
  detail::batch_stream(first, last, cost, fn, co, o, so, buf, sample.size(), per_item, r);
  return r;
}

// Overload with a constant cost per item.
template <class InputIt, class Sentinel, class Fn>
chunk_result for_each_batch(InputIt first, Sentinel last, std::uint64_t bytes_per_item, Fn&& fn,
                            const chunk_options& co = {}, const retry_options& o = {},
                            const stream_options& so = {}) {
  return for_each_batch(
      first, last, [bytes_per_item](const auto&) { return bytes_per_item; }, std::forward<Fn>(fn),
      co, o, so);
}

} // namespace gmem
