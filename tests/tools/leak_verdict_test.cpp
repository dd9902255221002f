// The leak verdict's rule (leak_verdict.h) on simulated programs: what grows as the program
// repeats is a leak; weights, optimizer state, a bounded cache and per-step buffers are held.
#include <gtest/gtest.h>

#include <map>

#include "tests/tools/sample_trace.h"
#include "tools/analysis/leak_verdict.h"

namespace gmem::tools {
namespace {

using gmem::trace::event_type;
using testing::k_ms;
using testing::k_start;

// A Python program recorded allocation by allocation: stack ids are the sites (site = id - 1),
// one allocation per millisecond; what is not freed by the end is in the live table.
class program {
public:
  explicit program(bool python = true) {
    t_.info.state = gmem::trace::trace_state::exited;
    t_.info.start_realtime_ns = k_start;
    if (python) t_.python_stacks[1] = {};
  }
  std::uintptr_t alloc(std::uint32_t site, std::uint64_t bytes = 1 << 20) {
    const std::uintptr_t a = next_address_ += 1 << 20;
    now_ += k_ms;
    testing::add_event(t_, event_type::alloc, now_, a, bytes, bytes, site + 1);
    open_[a] = {site + 1, bytes, now_};
    return a;
  }
  void free(std::uintptr_t a) {
    now_ += k_ms;
    testing::add_event(t_, event_type::free, now_, a, open_.at(a).bytes, open_.at(a).bytes);
    open_.erase(a);
  }
  // A training step's temporaries: allocated and freed.
  void temporaries(int n) {
    for (int i = 0; i < n; ++i)
      free(alloc(9));
  }
  // The trace at exit (or, with `running`, of the process still running).
  gmem::trace::trace end(bool running = false) {
    gmem::trace::trace t = t_;
    for (const auto& [a, o] : open_) {
      gmem::trace::live_allocation l;
      l.address = a;
      l.requested = l.rounded = o.bytes;
      l.time_ns = o.time_ns;
      l.stack_id = o.stack;
      t.live.push_back(l);
    }
    t.info.exit_realtime_ns = running ? 0 : k_start + now_ + k_ms;
    t.info.heartbeat_realtime_ns = k_start + now_ + k_ms;
    if (running) t.info.state = gmem::trace::trace_state::crashed; // "now" = last heartbeat
    return t;
  }

private:
  struct origin {
    std::uint32_t stack;
    std::uint64_t bytes;
    std::uint64_t time_ns;
  };
  gmem::trace::trace t_;
  std::uint64_t now_ = 0;
  std::uintptr_t next_address_ = 0x7f0000000000;
  std::map<std::uintptr_t, origin> open_;
};

std::vector<site_trend> trends(const gmem::trace::trace& t) {
  return site_trends(
      t, [](std::uint32_t stack, gmem::trace::alloc_kind) -> std::size_t { return stack - 1; }, 10);
}

TEST(leak_verdict, a_list_of_step_outputs_grows_and_the_weights_are_held) {
  program p;
  for (int w = 0; w < 50; ++w) // weights: one burst at start
    p.alloc(0);
  for (int step = 0; step < 20; ++step) {
    p.temporaries(10);
    p.alloc(1); // kept in a list
  }
  const auto t = p.end();
  const auto tr = trends(t);
  EXPECT_FALSE(tr[0].growing);
  EXPECT_EQ(tr[0].live_count, 50u);
  EXPECT_LE(tr[0].slices, 3u); // 50 of 270 allocations
  EXPECT_TRUE(tr[1].growing);
  EXPECT_GE(tr[1].slices, 12u);
  EXPECT_GE(tr[1].rise_count, 8);
  EXPECT_EQ(verdict_of(tr[0], native_program_ended(t)), leak_verdict::held);
  EXPECT_EQ(verdict_of(tr[1], native_program_ended(t)), leak_verdict::leak);
  EXPECT_NE(growth_rate_text(tr[1]).find("/min over the last"), std::string::npos);
}

TEST(leak_verdict, per_step_buffers_and_optimizer_state_are_held) {
  program p;
  std::vector<std::uintptr_t> grads;
  for (int step = 0; step < 10; ++step) {
    p.temporaries(20);
    for (auto g : grads) // zero_grad(set_to_none=True): last step's gradients freed
      p.free(g);
    grads.clear();
    for (int i = 0; i < 8; ++i)
      grads.push_back(p.alloc(2));
    if (step == 0)
      for (int i = 0; i < 16; ++i)
        p.alloc(3); // optimizer state, first step
  }
  const auto t = p.end();
  const auto tr = trends(t);
  EXPECT_EQ(tr[2].live_count, 8u);
  EXPECT_FALSE(tr[2].growing);
  EXPECT_LE(tr[2].rise_count, 0);
  EXPECT_FALSE(tr[3].growing);
}

TEST(leak_verdict, a_bounded_cache_that_evicts_is_held_one_that_never_does_grows) {
  program p;
  std::vector<std::uintptr_t> lru, unbounded;
  for (int step = 0; step < 40; ++step) {
    p.temporaries(5);
    lru.push_back(p.alloc(4)); // lru_cache(maxsize=4) missing every time
    if (lru.size() > 4) {
      p.free(lru.front());
      lru.erase(lru.begin());
    }
    unbounded.push_back(p.alloc(5)); // a dict that only grows
  }
  const auto tr = trends(p.end());
  EXPECT_EQ(tr[4].live_count, 4u);
  EXPECT_FALSE(tr[4].growing);
  EXPECT_TRUE(tr[5].growing);
}

TEST(leak_verdict, one_loop_that_fills_a_list_at_the_end_is_held) {
  program p;
  for (int step = 0; step < 20; ++step)
    p.temporaries(5);
  for (int i = 0; i < 24; ++i) { // an index built in the run's second half, kept to the end
    p.temporaries(3);
    p.alloc(6);
  }
  const auto tr = trends(p.end());
  EXPECT_GE(tr[6].slices, 4u);
  EXPECT_EQ(tr[6].early_slices, 0u);
  EXPECT_FALSE(tr[6].growing);
}

TEST(leak_verdict, too_few_repetitions_show_no_growth) {
  program p;
  for (int step = 0; step < 3; ++step) {
    p.temporaries(10);
    p.alloc(1);
  }
  const auto tr = trends(p.end());
  EXPECT_EQ(tr[1].live_count, 3u);
  EXPECT_FALSE(tr[1].growing); // the documented limit: fewer than 4 repetitions
}

TEST(leak_verdict, without_events_the_clock_is_time) {
  program p;
  for (int w = 0; w < 30; ++w)
    p.alloc(0);
  for (int step = 0; step < 30; ++step) {
    p.temporaries(3);
    p.alloc(1);
  }
  auto t = p.end();
  t.events.clear();
  const auto tr = trends(t);
  EXPECT_FALSE(tr[0].growing);
  EXPECT_TRUE(tr[1].growing);
}

TEST(leak_verdict, a_native_program_that_exited_leaks_what_it_never_freed) {
  program native(false);
  native.alloc(0);
  const auto ended = native.end();
  EXPECT_TRUE(native_program_ended(ended));
  EXPECT_EQ(verdict_of(trends(ended)[0], true), leak_verdict::leak);
  // Still running: the same allocation is held until the program ends.
  const auto running = native.end(true);
  auto alive = running;
  alive.info.state = gmem::trace::trace_state::running;
  EXPECT_FALSE(native_program_ended(alive));
  alive.info.saved_file = true; // a saved copy of a running process: it may free it yet
  EXPECT_FALSE(native_program_ended(alive));
  // A Python program's never-freed memory gets the rule.
  program python;
  python.alloc(0);
  EXPECT_FALSE(native_program_ended(python.end()));
  EXPECT_EQ(verdict_of(trends(python.end())[0], false), leak_verdict::held);
}

} // namespace
} // namespace gmem::tools
