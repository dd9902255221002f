// Each thread's memo of the stacks it interned (profiler/recorder/stack_memo.h): an exact match
// of writer, length and every word, never a hash alone; several call sites in turn all found;
// one writer's ids never given for another's; each thread its own (per_thread.h). And through
// the writer: the ids the memo gives are the intern table's.
#include "profiler/recorder/per_thread.h"
#include "profiler/recorder/stack_memo.h"
#include "test_buffer.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace gmem::trace {
namespace {

// Writer numbers no trace_writer of this process gets (they count from 1): the per-thread memo
// of the main thread outlives each test.
constexpr std::uint64_t k_writer1 = std::uint64_t{1} << 60, k_writer2 = k_writer1 + 1;

std::vector<std::uintptr_t> stack_of(std::uintptr_t site, unsigned n = 33) {
  std::vector<std::uintptr_t> ips;
  for (unsigned i = 0; i < n; ++i)
    ips.push_back(0x400000 + i * 0x100 + (i == 20 ? site : 0)); // sites differ in one word
  return ips;
}
std::uint64_t hash_of(const std::vector<std::uintptr_t>& ips) {
  return hash_bytes(ips.data(), ips.size() * sizeof(std::uintptr_t));
}
unsigned count_of(const std::vector<std::uintptr_t>& ips) {
  return static_cast<unsigned>(ips.size());
}

TEST(StackMemo, MissUntilStoredThenHit) {
  auto m = std::make_unique<stack_memo>();
  const auto a = stack_of(1);
  EXPECT_EQ(m->find_last(k_writer1, a.data(), count_of(a)), 0u);
  EXPECT_EQ(m->find(k_writer1, hash_of(a), a.data(), count_of(a)), 0u);
  m->store(k_writer1, hash_of(a), a.data(), count_of(a), 7);
  EXPECT_EQ(m->find_last(k_writer1, a.data(), count_of(a)), 7u);
  EXPECT_EQ(m->find(k_writer1, hash_of(a), a.data(), count_of(a)), 7u);
}

// The hash only picks the entry: a stack with the same hash and another word, another length
// or another writer is not the one remembered.
TEST(StackMemo, ExactMatchOnly) {
  auto m = std::make_unique<stack_memo>();
  const auto a = stack_of(1);
  const std::uint64_t h = hash_of(a);
  m->store(k_writer1, h, a.data(), count_of(a), 7);
  auto b = a;
  b.back() ^= 1;
  EXPECT_EQ(m->find(k_writer1, h, b.data(), count_of(b)), 0u);
  EXPECT_EQ(m->find_last(k_writer1, b.data(), count_of(b)), 0u);
  EXPECT_EQ(m->find(k_writer1, h, a.data(), count_of(a) - 1), 0u);
  EXPECT_EQ(m->find_last(k_writer1, a.data(), count_of(a) - 1), 0u);
  EXPECT_EQ(m->find(k_writer2, h, a.data(), count_of(a)), 0u);
  EXPECT_EQ(m->find_last(k_writer2, a.data(), count_of(a)), 0u);
}

TEST(StackMemo, SitesInTurnAllFound) {
  auto m = std::make_unique<stack_memo>();
  std::vector<std::vector<std::uintptr_t>> sites;
  std::vector<bool> used(stack_memo::k_stacks, false);
  for (std::uintptr_t s = 1; sites.size() < stack_memo::k_stacks; ++s) { // one per entry
    auto ips = stack_of(s);
    const unsigned i = stack_memo::index(hash_of(ips));
    if (used[i]) continue;
    used[i] = true;
    sites.push_back(ips);
  }
  for (std::size_t s = 0; s < sites.size(); ++s)
    m->store(k_writer1, hash_of(sites[s]), sites[s].data(), count_of(sites[s]),
             static_cast<std::uint32_t>(s + 1));
  for (int round = 0; round < 3; ++round)
    for (std::size_t s = 0; s < sites.size(); ++s) {
      const auto& ips = sites[s];
      EXPECT_EQ(m->find(k_writer1, hash_of(ips), ips.data(), count_of(ips)), s + 1);
      EXPECT_EQ(m->find_last(k_writer1, ips.data(), count_of(ips)), s + 1); // found last
    }
}

TEST(StackMemo, LongStacksAndZeroIdsAreNotRemembered) {
  auto m = std::make_unique<stack_memo>();
  const auto deep = stack_of(1, stack_memo::k_words + 1);
  m->store(k_writer1, hash_of(deep), deep.data(), count_of(deep), 7);
  EXPECT_EQ(m->find(k_writer1, hash_of(deep), deep.data(), count_of(deep)), 0u);
  const auto a = stack_of(2);
  m->store(k_writer1, hash_of(a), a.data(), count_of(a),
           0); // no room in the table: nothing to reuse
  EXPECT_EQ(m->find(k_writer1, hash_of(a), a.data(), count_of(a)), 0u);
}

TEST(StackMemo, EachThreadHasItsOwn) {
  stack_memo* main_memo = per_thread<stack_memo>::get();
  ASSERT_NE(main_memo, nullptr);
  EXPECT_EQ(per_thread<stack_memo>::get(), main_memo);
  const auto a = stack_of(1);
  main_memo->store(k_writer1, hash_of(a), a.data(), count_of(a), 7);
  std::vector<std::uint32_t> found(4, 1);
  std::vector<stack_memo*> seen(4, nullptr);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < found.size(); ++t)
    threads.emplace_back([&, t] {
      stack_memo* mine = per_thread<stack_memo>::get();
      seen[t] = mine;
      if (mine == nullptr) return;
      found[t] = mine->find(k_writer1, hash_of(a), a.data(), count_of(a));
      for (std::uintptr_t s = 0; s < 1000; ++s) { // and storing here races with no thread
        const auto ips = stack_of(s + 100 * t);
        mine->store(k_writer1, hash_of(ips), ips.data(), count_of(ips), 9);
      }
    });
  for (auto& th : threads)
    th.join();
  for (std::size_t t = 0; t < found.size(); ++t) {
    EXPECT_NE(seen[t], nullptr);
    EXPECT_NE(seen[t], main_memo);
    EXPECT_EQ(found[t], 0u);
  }
  EXPECT_EQ(main_memo->find_last(k_writer1, a.data(), count_of(a)), 7u);
}

// Through the writer: call sites in turn get the intern table's ids every time, and a second
// writer (a new trace in the same process) gets its own ids, not the first one's.
TEST(StackMemo, WriterIdsAreTheTablesAndOneWritersOwn) {
  testing::trace_buffer one, two;
  std::vector<std::vector<std::uintptr_t>> sites;
  for (std::uintptr_t s = 1; s <= 12; ++s)
    sites.push_back(stack_of(s));
  std::vector<std::uint32_t> ids;
  for (const auto& ips : sites)
    ids.push_back(one.writer->intern_stack(ips.data(), count_of(ips)));
  for (std::size_t s = 0; s < sites.size(); ++s) {
    ASSERT_NE(ids[s], 0u);
    for (std::size_t r = 0; r < s; ++r)
      EXPECT_NE(ids[s], ids[r]);
  }
  for (int round = 0; round < 3; ++round)
    for (std::size_t s = 0; s < sites.size(); ++s)
      EXPECT_EQ(one.writer->intern_stack(sites[s].data(), count_of(sites[s])), ids[s]);
  // The second writer's table is empty: the stacks this thread interned into the first one
  // are stored there too (a fresh table of the same size may give them the same ids: ids are
  // slots, and the slot follows the hash).
  auto stored = [](const testing::trace_buffer& b) {
    return layout::load_word(&static_cast<const layout::header*>(b.writer->data())->stack_count);
  };
  const std::uint64_t before = stored(one);
  EXPECT_EQ(stored(two), 0u);
  for (const auto& ips : sites)
    EXPECT_NE(two.writer->intern_stack(ips.data(), count_of(ips)), 0u);
  EXPECT_EQ(stored(two), sites.size());
  EXPECT_EQ(stored(one), before);
}

} // namespace
} // namespace gmem::trace
