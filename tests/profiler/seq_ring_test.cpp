#include "profiler/seq_ring.h"

#include <atomic>
#include <gtest/gtest.h>
#include <thread>
#include <vector>

#include "tests/profiler/space_fixture.h"

namespace gmem::trace {
namespace {

struct ring_fixture : testing::space_fixture {
  static constexpr std::uint32_t k_words = 8;
  std::uint64_t head = 0, dropped = 0;
  seq_ring ring;
  explicit ring_fixture(std::uint64_t capacity, std::uint64_t first_chunk = 4,
                        std::uint64_t bytes = std::uint64_t{4} << 20)
      : space_fixture(bytes) {
    EXPECT_TRUE(
        ring.open(&space, h, layout::k_events, capacity, first_chunk, k_words, &head, &dropped));
  }
  std::uint64_t append(std::uint64_t payload) {
    std::uint64_t w[k_words] = {0, payload, payload * 2, payload * 3};
    return ring.append(w);
  }
  bool read(std::uint64_t seq, std::uint64_t* out) {
    ring_view view;
    std::uint64_t corrupt = 0;
    const char* problem = nullptr;
    EXPECT_TRUE(view.open(base(), size(), h->sections[layout::k_events],
                          h->extents[layout::k_events], k_words, &corrupt, &problem));
    EXPECT_EQ(corrupt, 0u);
    return view.read(seq, out);
  }
  // The record slot of `seq`, for tests that fake a stuck writer.
  std::uint64_t* slot(std::uint64_t seq) {
    const std::uint64_t index = (seq - 1) % h->sections[layout::k_events].capacity;
    const std::uint64_t c0 = h->extents[layout::k_events][0].capacity;
    const std::uint32_t k = layout::ring_chunk_of(index, c0);
    return space.words(h->extents[layout::k_events][k].offset) +
           (index - layout::ring_chunk_start(k, c0)) * k_words;
  }
};

TEST(seq_ring, records_in_order_with_sequence_numbers) {
  ring_fixture f(8);
  for (std::uint64_t i = 1; i <= 5; ++i)
    EXPECT_EQ(f.append(i * 10), i);
  std::uint64_t out[8];
  for (std::uint64_t seq = 1; seq <= 5; ++seq) {
    ASSERT_TRUE(f.read(seq, out));
    EXPECT_EQ(out[0], 2 * seq);
    EXPECT_EQ(out[1], seq * 10);
    EXPECT_EQ(out[3], seq * 30);
  }
  EXPECT_FALSE(f.read(6, out)); // not written yet
}

TEST(seq_ring, wrap_around_loses_exactly_the_lapped_records) {
  ring_fixture f(8);
  for (std::uint64_t i = 1; i <= 21; ++i)
    f.append(i);
  EXPECT_EQ(f.head, 21u);
  std::uint64_t out[8];
  std::uint64_t readable = 0;
  for (std::uint64_t seq = 1; seq <= 21; ++seq) {
    const bool ok = f.read(seq, out);
    EXPECT_EQ(ok, seq > 13) << "seq " << seq;
    if (ok) {
      EXPECT_EQ(out[1], seq);
      ++readable;
    }
  }
  EXPECT_EQ(21 - readable, 13u); // lost = lapped
  EXPECT_EQ(f.dropped, 0u);
}

TEST(seq_ring, a_slot_still_being_written_is_not_overwritten) {
  ring_fixture f(4);
  f.append(1);
  *f.slot(1) = 2 * 5 - 1; // pretend a writer of seq 5 is stuck inside slot 0
  f.head = 4;
  EXPECT_EQ(f.append(9), 0u); // seq 5 maps to slot 0: dropped, counted
  EXPECT_EQ(f.dropped, 1u);
  std::uint64_t out[8];
  EXPECT_FALSE(f.read(5, out)); // a reader gives up after bounded retries
}

TEST(seq_ring, concurrent_writers_never_mix_records) {
  ring_fixture f(1024);
  constexpr int k_threads = 4, k_each = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&f, t] {
      for (int i = 0; i < k_each; ++i)
        f.append(static_cast<std::uint64_t>(t) << 32 | i);
    });
  std::uint64_t consistent = 0;
  std::atomic<bool> writers_done{false};
  // Reads while the writers run and once more after they are done, so the check cannot pass
  // (or fail) only because the reader was scheduled before or after all the writing.
  std::thread reader([&] {
    std::uint64_t out[8];
    bool last_pass = false;
    while (!last_pass) {
      last_pass = writers_done.load();
      for (std::uint64_t seq = 1; seq <= __atomic_load_n(&f.head, __ATOMIC_RELAXED); seq += 37)
        if (f.read(seq, out)) {
          EXPECT_EQ(out[2], out[1] * 2);
          EXPECT_EQ(out[3], out[1] * 3);
          ++consistent;
        }
    }
  });
  for (auto& t : threads)
    t.join();
  writers_done = true;
  reader.join();
  EXPECT_EQ(f.head, std::uint64_t{k_threads} * k_each);
  std::uint64_t out[8], readable = 0;
  for (std::uint64_t seq = f.head - 1023; seq <= f.head; ++seq)
    readable += f.read(seq, out);
  EXPECT_GE(readable + f.dropped, 1024u); // the whole last lap, except dropped records
  EXPECT_GT(consistent, 0u);
}

TEST(seq_ring, chunks_are_added_as_the_ring_first_reaches_them) {
  ring_fixture f(64, 4);
  const std::uint64_t start = f.size();
  EXPECT_EQ(f.h->sections[layout::k_events].extent_count, 5u); // 4, 4, 8, 16, 32
  for (std::uint64_t i = 1; i <= 10; ++i)
    f.append(i);
  EXPECT_EQ(f.size(), start + (4 + 8) * 64); // chunks 1 and 2 (records 4..15)
  for (std::uint64_t i = 11; i <= 200; ++i)
    f.append(i);
  EXPECT_EQ(f.size(), start + (64 - 4) * 64); // all of it after one lap, never more
  std::uint64_t out[8];
  for (std::uint64_t seq = 137; seq <= 200; ++seq) {
    ASSERT_TRUE(f.read(seq, out)) << seq;
    EXPECT_EQ(out[1], seq);
  }
}

TEST(seq_ring, a_chunk_the_trace_has_no_room_for_drops_its_records_only) {
  ring_fixture f(64, 4, layout::k_header_bytes + 4 * 64 + 4 * 64); // chunks 0 and 1 only
  for (std::uint64_t i = 1; i <= 70; ++i)
    f.append(i);
  // Seqs 9..64 map to chunks 2..4 (missing): dropped; seqs 65.. wrap into chunk 0.
  EXPECT_EQ(f.dropped, 56u);
  std::uint64_t out[8];
  EXPECT_TRUE(f.read(66, out));
  EXPECT_FALSE(f.read(20, out));
  EXPECT_TRUE(f.read(8, out));
  EXPECT_EQ(f.h->growth_refused, 1u);
}

} // namespace
} // namespace gmem::trace
