// Event lanes: a lane per writing thread, given back at thread exit, lane 0 for the rest.
#include "profiler/recorder/event_lanes.h"

#include <barrier>
#include <gtest/gtest.h>
#include <thread>
#include <vector>

#include "tests/profiler/space_fixture.h"

namespace gmem::trace {
namespace {

namespace lw = layout::lane_word;

struct lanes_fixture : testing::space_fixture {
  event_lanes lanes;
  // 4 lanes (lane 0 shared, 16 records), others 4..64 records, `budget` records in all.
  explicit lanes_fixture(std::uint64_t budget = 1024) {
    EXPECT_TRUE(lanes.open(&space, h, 4, 64, 16, 4, budget));
  }
  std::uint64_t* lane(std::uint32_t n) {
    return space.words(h->extents[layout::k_events][0].offset) + n * lw::count;
  }
  std::uint64_t head(std::uint32_t n) { return layout::load_acquire(lane(n) + lw::head); }
  std::uint64_t append(std::uint64_t payload) {
    std::uint64_t w[layout::event_word::count] = {0, payload};
    return lanes.append(w);
  }
};

TEST(event_lanes, the_section_describes_the_lanes) {
  lanes_fixture f;
  EXPECT_EQ(f.h->sections[layout::k_events].capacity, 64u);
  EXPECT_EQ(f.h->sections[layout::k_events].record_bytes, 64u);
  EXPECT_EQ(f.h->extents[layout::k_events][0].capacity, 4u);
  EXPECT_EQ(f.lane(0)[lw::flags], lw::k_shared);
  EXPECT_EQ(f.lane(0)[lw::capacity], 16u);
  EXPECT_EQ(f.lane(1)[lw::capacity], 0u); // no thread yet
  EXPECT_EQ(f.lanes.lanes_claimed(), 0u);
}

TEST(event_lanes, each_thread_writes_its_own_lane_and_gives_it_back_at_exit) {
  lanes_fixture f;
  std::barrier all_in(3);
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t)
    threads.emplace_back([&f, &all_in, t] {
      for (int i = 0; i <= t; ++i)
        EXPECT_EQ(f.append(static_cast<std::uint64_t>(t)), static_cast<std::uint64_t>(i + 1));
      all_in.arrive_and_wait(); // three lanes held at once
      EXPECT_EQ(f.lanes.lanes_claimed(), 3u);
      all_in.arrive_and_wait();
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(f.lanes.lanes_claimed(), 0u); // given back as the threads exited
  std::uint64_t heads = 0;
  for (std::uint32_t n = 1; n < 4; ++n) {
    EXPECT_GE(f.head(n), 1u);
    heads += f.head(n);
  }
  EXPECT_EQ(heads, 1u + 2 + 3);
  EXPECT_EQ(f.head(0), 0u); // nobody needed the shared lane
  // A later thread takes a lane given back and continues its numbering.
  std::thread([&f] {
    const std::uint64_t seq = f.append(9);
    EXPECT_GE(seq, 2u);
    EXPECT_LE(seq, 4u);
  }).join();
  EXPECT_EQ(f.head(1) + f.head(2) + f.head(3), 7u);
}

TEST(event_lanes, threads_beyond_the_lanes_share_lane_0) {
  lanes_fixture f;
  constexpr int k_threads = 5; // 3 lanes of their own
  std::barrier all_in(k_threads);
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&f, &all_in] {
      all_in.arrive_and_wait();
      f.append(1);
      f.append(2);
      all_in.arrive_and_wait(); // nobody exits (and gives a lane back) before everybody wrote
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(f.head(1) + f.head(2) + f.head(3), 6u);
  EXPECT_EQ(f.head(0), 4u); // two threads, two records each
}

TEST(event_lanes, a_thread_without_a_lane_takes_one_once_another_is_given_back) {
  lanes_fixture f;
  std::barrier held(4), late_wrote(4);
  std::vector<std::thread> holders;
  for (int t = 0; t < 3; ++t)
    holders.emplace_back([&, t] {
      f.append(1);
      held.arrive_and_wait();
      late_wrote.arrive_and_wait(); // the late thread wrote lane 0
      if (t == 0) {                 // holder 0 exits, the others stay
        late_wrote.arrive_and_drop();
        return;
      }
      late_wrote.arrive_and_wait();
    });
  std::thread late([&] {
    held.arrive_and_wait();
    f.append(2); // all lanes taken: lane 0
    EXPECT_EQ(f.head(0), 1u);
    late_wrote.arrive_and_wait();
    holders[0].join(); // its lane is free now
    f.append(3);       // this thread's own lane from now on
    f.append(4);
    EXPECT_EQ(f.head(0), 1u);
    late_wrote.arrive_and_wait();
  });
  late.join();
  for (std::size_t t = 1; t < holders.size(); ++t)
    holders[t].join();
  EXPECT_EQ(f.head(1) + f.head(2) + f.head(3), 3u + 2);
}

TEST(event_lanes, a_thread_keeps_its_lane_in_each_trace_it_writes) {
  lanes_fixture a, b;
  std::thread([&] {
    for (int i = 0; i < 3; ++i) {
      a.append(1);
      b.append(2);
    }
    EXPECT_EQ(a.lanes.lanes_claimed(), 1u);
    EXPECT_EQ(b.lanes.lanes_claimed(), 1u);
  }).join();
  EXPECT_EQ(a.head(1), 3u);
  EXPECT_EQ(b.head(1), 3u);
  EXPECT_EQ(a.lanes.lanes_claimed(), 0u);
}

TEST(event_lanes, no_budget_for_a_first_chunk_means_lane_0) {
  lanes_fixture f(6); // one first chunk of 4 fits, a second does not
  std::barrier all_in(2);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&f, &all_in] {
      all_in.arrive_and_wait();
      f.append(1);
      all_in.arrive_and_wait();
    });
  for (auto& t : threads)
    t.join();
  EXPECT_EQ(f.head(1), 1u);
  EXPECT_EQ(f.head(0), 1u);
  EXPECT_EQ(f.lane(2)[lw::capacity], 0u);
  // The lane given back is still there for the next thread.
  std::thread([&f] { f.append(3); }).join();
  EXPECT_EQ(f.head(1), 2u);
}

TEST(event_lanes, a_lane_outlives_its_trace_without_harm) {
  auto f = std::make_unique<lanes_fixture>();
  std::barrier step(2);
  std::uint64_t seq = 0;
  std::thread t([&] {
    seq = f->append(1);
    step.arrive_and_wait(); // the trace goes away while the thread still holds its lane
    step.arrive_and_wait();
  });
  step.arrive_and_wait();
  EXPECT_EQ(seq, 1u); // the first record of a lane of its own
  EXPECT_EQ(f->lanes.lanes_claimed(), 1u);
  f.reset();
  // A new trace, opened while the thread still runs (it may take the old one's memory).
  auto g = std::make_unique<lanes_fixture>();
  step.arrive_and_wait();
  t.join(); // its exit handler finds its lanes gone and touches nothing
  // Nothing of the old claim reached the new trace: no lane taken or given back, no record.
  EXPECT_EQ(g->lanes.lanes_claimed(), 0u);
  for (std::uint32_t n = 0; n < 4; ++n)
    EXPECT_EQ(g->head(n), 0u) << "lane " << n;
  std::thread([&g] { EXPECT_EQ(g->append(2), 1u); }).join();
  EXPECT_EQ(g->lanes.lanes_claimed(), 0u);
  EXPECT_EQ(g->head(1), 1u);
}

// Observation cost: each thread adds to its own lane's words; threads beyond the lanes add to
// lane 0's; observed() adds up every lane.
TEST(event_lanes, observed_costs_are_kept_per_lane_and_added_up) {
  lanes_fixture f; // lanes 1..3 for threads, lane 0 shared
  std::barrier all_in(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&f, &all_in, t] {
      if (t < 3) f.append(1); // claims a lane; the fourth thread finds none and shares lane 0
      all_in.arrive_and_wait();
      if (t == 3) f.append(1);
      for (int i = 0; i < 10; ++i) {
        f.lanes.add_observed(true, 100 + static_cast<std::uint64_t>(t));
        if (i % 2 == 0) f.lanes.add_observed(false, 7);
      }
      all_in.arrive_and_wait();
    });
  for (auto& t : threads)
    t.join();
  std::uint64_t lanes_with_10 = 0;
  for (std::uint32_t n = 0; n < 4; ++n) {
    EXPECT_EQ(f.lane(n)[lw::observed_allocs], 10u) << n;
    EXPECT_EQ(f.lane(n)[lw::observed_frees], 5u) << n;
    EXPECT_EQ(f.lane(n)[lw::observed_free_ticks], 35u) << n;
    lanes_with_10 += f.lane(n)[lw::observed_allocs] == 10;
  }
  EXPECT_EQ(lanes_with_10, 4u);
  const event_lanes::observed_totals sum = f.lanes.observed();
  EXPECT_EQ(sum.allocs, 40u);
  EXPECT_EQ(sum.alloc_ticks, 10u * (100 + 101 + 102 + 103));
  EXPECT_EQ(sum.frees, 20u);
  EXPECT_EQ(sum.free_ticks, 140u);
}

} // namespace
} // namespace gmem::trace
