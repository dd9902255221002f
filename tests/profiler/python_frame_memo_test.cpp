// Each thread's memo of Python frames (profiler/recorder/python_frame_memo.h): a frame's word is
// reused only for the same frame address, code object, line table and instruction; frames met
// at any depth and in any order are found again; another string table empties it; each thread
// has its own.
#include "profiler/recorder/python_frame_memo.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace gmem::trace {
namespace {

using memo = python_frame_memo;

// Fake addresses: only compared and hashed, never followed.
const void* at(std::uintptr_t a) {
  return reinterpret_cast<const void*>(a);
}
memo::key frame_key(std::uintptr_t frame, std::uintptr_t code, std::intptr_t instr) {
  return {at(frame), at(code), at(code + 0x80), instr};
}

TEST(PythonFrameMemo, MissUntilStoredThenHit) {
  auto m = std::make_unique<memo>();
  m->use(at(1));
  const memo::key k = frame_key(0x7000'0000, 0x5000'0000, 0x5000'00d0);
  EXPECT_EQ(m->find(k), 0u);
  m->store(k, 42);
  EXPECT_EQ(m->find(k), 42u);
}

// What changes between two captures of one frame address: another instruction (the frame moved
// on to another line), another code object (another function's frame at that address), the same
// code object's address with another line table (a dead code object's address reused).
TEST(PythonFrameMemo, AnyFieldChangedMisses) {
  auto m = std::make_unique<memo>();
  m->use(at(1));
  const memo::key k = frame_key(0x7000'0000, 0x5000'0000, 0x5000'00d0);
  m->store(k, 42);
  memo::key other = k;
  other.instr += 2;
  EXPECT_EQ(m->find(other), 0u);
  other = k;
  other.code = at(0x5100'0000);
  EXPECT_EQ(m->find(other), 0u);
  other = k;
  other.linetable = at(0x6000'0000);
  EXPECT_EQ(m->find(other), 0u);
  other = k;
  other.frame = at(0x7000'0040);
  EXPECT_EQ(m->find(other), 0u);
  EXPECT_EQ(m->find(k), 42u);
}

// A call site's frames found again whatever the depth it is reached at and whatever other sites
// were captured in between (the positional memo this replaced missed every frame of a stack one
// frame deeper or shallower than the last one).
TEST(PythonFrameMemo, FramesOfSeveralSitesAtSeveralDepthsAllHit) {
  auto m = std::make_unique<memo>();
  m->use(at(1));
  std::vector<memo::key> keys;
  for (std::uintptr_t depth = 0; depth < 40; ++depth) // a stack's outer frames, one per slot
    keys.push_back(frame_key(0x7000'0000 + depth * 0x48, 0x5000'0000 + (depth % 7) * 0x1000,
                             static_cast<std::intptr_t>(0x5000'00d0 + depth * 6)));
  for (std::uintptr_t site = 0; site < 8; ++site) // inner frames: one more per site
    keys.push_back(frame_key(0x7000'0000 + (40 + site) * 0x48, 0x5800'0000 + site * 0x1000,
                             static_cast<std::intptr_t>(0x5800'0010 + site * 0x1000)));
  std::uint64_t word = 1;
  for (const auto& k : keys)
    m->store(k, word++);
  // No two of these frames share an entry (at 1024 entries), so every one is found.
  word = 1;
  for (const auto& k : keys)
    EXPECT_EQ(m->find(k), word++);
}

// A loop's frame allocating from two lines, one after the other: both words stay.
TEST(PythonFrameMemo, OneFrameAtTwoInstructionsKeepsBoth) {
  auto m = std::make_unique<memo>();
  m->use(at(1));
  const memo::key a = frame_key(0x7000'0000, 0x5000'0000, 0x5000'00d0);
  memo::key b = a;
  b.instr += 0x40;
  m->store(a, 1);
  m->store(b, 2);
  EXPECT_EQ(m->find(a), 1u);
  EXPECT_EQ(m->find(b), 2u);
}

TEST(PythonFrameMemo, ALaterFrameAtTheSameEntryReplacesIt) {
  auto m = std::make_unique<memo>();
  m->use(at(1));
  const memo::key a = frame_key(0x7000'0000, 0x5000'0000, 0x5000'00d0);
  memo::key b = a;
  for (std::uintptr_t f = 0x7000'0008;; f += 8) { // another frame mapping to a's entry
    b.frame = at(f);
    if (memo::index(b) == memo::index(a)) break;
  }
  m->store(a, 1);
  m->store(b, 2);
  EXPECT_EQ(m->find(a), 0u);
  EXPECT_EQ(m->find(b), 2u);
}

// Words hold another string table's ids: a writer made after another one (tests, a new trace)
// must not get them.
TEST(PythonFrameMemo, AnotherStringTableEmptiesIt) {
  auto m = std::make_unique<memo>();
  m->use(at(1));
  const memo::key k = frame_key(0x7000'0000, 0x5000'0000, 0x5000'00d0);
  m->store(k, 42);
  m->use(at(1));
  EXPECT_EQ(m->find(k), 42u);
  m->use(at(2));
  EXPECT_EQ(m->find(k), 0u);
  m->store(k, 43);
  m->use(at(1));
  EXPECT_EQ(m->find(k), 0u);
}

TEST(PythonFrameMemo, EachThreadHasItsOwn) {
  memo* main_memo = memo::mine();
  ASSERT_NE(main_memo, nullptr);
  EXPECT_EQ(memo::mine(), main_memo); // made once per thread
  main_memo->use(at(1));
  const memo::key k = frame_key(0x7000'0000, 0x5000'0000, 0x5000'00d0);
  main_memo->store(k, 42);
  std::vector<memo*> seen(4, nullptr);
  std::vector<std::uint64_t> found(4, 1);
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < seen.size(); ++t)
    threads.emplace_back([&, t] {
      memo* mine = memo::mine();
      seen[t] = mine;
      if (mine == nullptr) return;
      mine->use(at(1));
      found[t] = mine->find(k);       // the main thread's frame is not this thread's
      for (int i = 0; i < 10000; ++i) // and storing here does not race with other threads
        mine->store(frame_key(0x7000'0000 + static_cast<std::uintptr_t>(i) * 8, 0x5000'0000,
                              static_cast<std::intptr_t>(t)),
                    static_cast<std::uint64_t>(i) + 1);
    });
  for (auto& th : threads)
    th.join();
  for (std::size_t t = 0; t < seen.size(); ++t) {
    EXPECT_NE(seen[t], nullptr);
    EXPECT_NE(seen[t], main_memo);
    EXPECT_EQ(found[t], 0u);
  }
  EXPECT_EQ(main_memo->find(k), 42u);
}

} // namespace
} // namespace gmem::trace
