#include "profiler/seq_ring.h"

#include <atomic>
#include <gtest/gtest.h>
#include <thread>
#include <vector>

namespace gmem::trace {
namespace {

struct ring_fixture {
  static constexpr std::uint32_t k_words = 4;
  std::vector<std::uint64_t> records;
  std::uint64_t head = 0, dropped = 0;
  seq_ring ring;
  explicit ring_fixture(std::uint64_t capacity) : records(capacity * k_words, 0) {
    ring = seq_ring(records.data(), capacity, k_words, &head, &dropped);
  }
  std::uint64_t append(std::uint64_t payload) {
    std::uint64_t w[k_words] = {0, payload, payload * 2, payload * 3};
    return ring.append(w);
  }
  bool read(std::uint64_t seq, std::uint64_t* out) {
    return read_ring_record(records.data(), records.size() / k_words, k_words, seq, out);
  }
};

TEST(seq_ring, records_in_order_with_sequence_numbers) {
  ring_fixture f(8);
  for (std::uint64_t i = 1; i <= 5; ++i)
    EXPECT_EQ(f.append(i * 10), i);
  std::uint64_t out[4];
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
  std::uint64_t out[4];
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
  f.records[0] = 2 * 5 - 1; // pretend a writer of seq 5 is stuck inside slot 0
  f.head = 4;
  EXPECT_EQ(f.append(9), 0u); // seq 5 maps to slot 0: dropped, counted
  EXPECT_EQ(f.dropped, 1u);
  std::uint64_t out[4];
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
    std::uint64_t out[4];
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
  std::uint64_t out[4], readable = 0;
  for (std::uint64_t seq = f.head - 1023; seq <= f.head; ++seq)
    readable += f.read(seq, out);
  EXPECT_GE(readable + f.dropped, 1024u); // the whole last lap, except dropped records
  EXPECT_GT(consistent, 0u);
}

} // namespace
} // namespace gmem::trace
