#include "profiler/format/seq_ring.h"

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

// Owned mode: one writer, no locked instruction; the ring grows chunk by chunk until it wraps.
struct owned_fixture : testing::space_fixture {
  static constexpr std::uint32_t k_words = 8;
  std::uint64_t head = 0, dropped = 0, size_word = 0;
  layout::extent dir[layout::k_max_extents] = {};
  std::atomic<std::int64_t> budget;
  seq_ring ring;
  owned_fixture(std::uint64_t capacity, std::uint64_t first_chunk, std::int64_t records_allowed)
      : space_fixture(std::uint64_t{4} << 20), budget(records_allowed) {
    EXPECT_TRUE(ring.open(&space, dir, capacity, first_chunk, k_words, &head, &dropped, true,
                          &size_word, &budget));
  }
  std::uint64_t append(std::uint64_t payload) {
    std::uint64_t w[k_words] = {0, payload, payload * 2, payload * 3};
    return ring.append_owned(w);
  }
  ring_view view() {
    ring_view v;
    std::uint64_t corrupt = 0;
    const char* problem = nullptr;
    const std::uint64_t c0 = dir[0].capacity;
    const layout::section shape{size_word, k_words * 8, layout::ring_chunk_count(size_word, c0), 0,
                                0};
    EXPECT_TRUE(v.open(base(), size(), shape, dir, k_words, &corrupt, &problem)) << problem;
    EXPECT_EQ(corrupt, 0u);
    return v;
  }
};

TEST(seq_ring, owned_ring_grows_until_its_capacity_then_wraps) {
  owned_fixture f(16, 4, 1000);
  const std::uint64_t start = f.size();
  EXPECT_EQ(f.size_word, 4u);
  for (std::uint64_t i = 1; i <= 5; ++i)
    EXPECT_EQ(f.append(i * 10), i);
  EXPECT_EQ(f.size_word, 8u); // chunk 1 added when record 5 needed it
  EXPECT_EQ(f.size(), start + 4 * 64);
  for (std::uint64_t i = 6; i <= 40; ++i)
    f.append(i * 10);
  EXPECT_EQ(f.size_word, 16u);
  EXPECT_EQ(f.size(), start + (16 - 4) * 64); // never more than its capacity
  EXPECT_EQ(f.head, 40u);
  EXPECT_EQ(f.budget.load(), 1000 - 16);
  const ring_view v = f.view();
  EXPECT_EQ(v.seqs_present(1, 40), (std::vector<std::uint64_t>{25, 26, 27, 28, 29, 30, 31, 32, 33,
                                                               34, 35, 36, 37, 38, 39, 40}));
  std::uint64_t out[8];
  for (std::uint64_t seq = 25; seq <= 40; ++seq) {
    ASSERT_TRUE(v.read(seq, out)) << seq;
    EXPECT_EQ(out[1], seq * 10);
    EXPECT_EQ(out[3], seq * 30);
  }
  EXPECT_FALSE(v.read(24, out)); // lapped
  EXPECT_EQ(f.dropped, 0u);
}

TEST(seq_ring, owned_ring_wraps_early_when_the_budget_refuses_a_chunk) {
  owned_fixture f(64, 4, 16); // chunks of 4, 4, 8 fit the budget; the next 16 does not
  const std::uint64_t start = f.size();
  for (std::uint64_t i = 1; i <= 50; ++i)
    f.append(i);
  EXPECT_EQ(f.size_word, 16u);
  EXPECT_EQ(f.size(), start + (16 - 4) * 64);
  EXPECT_EQ(f.budget.load(), 0);
  const ring_view v = f.view();
  std::uint64_t out[8];
  for (std::uint64_t seq = 35; seq <= 50; ++seq) {
    ASSERT_TRUE(v.read(seq, out)) << seq;
    EXPECT_EQ(out[1], seq);
  }
  EXPECT_FALSE(v.read(34, out));
  EXPECT_EQ(f.dropped, 0u); // wrapping early loses history, never a new record
}

// The chunk after the last one is announced to the trace three quarters through the last one (its
// pages are made ready off the writing thread), once, with its exact size; a chunk the budget
// will refuse is not announced.
struct announcing_backing final : trace_backing {
  std::vector<std::uint64_t> announced; // total bytes asked for by each prepare()
  bool grow(std::uint64_t) noexcept override { return true; }
  void prepare(std::uint64_t total) noexcept override { announced.push_back(total); }
};

TEST(seq_ring, owned_ring_announces_each_chunk_before_it_reaches_it) {
  for (const std::int64_t budget_records : {1000, 8}) {
    SCOPED_TRACE(budget_records);
    std::vector<std::uint64_t> memory(1 << 16, 0);
    auto* h = reinterpret_cast<layout::header*>(memory.data());
    announcing_backing b;
    trace_space space(reinterpret_cast<std::byte*>(memory.data()), memory.size() * 8,
                      layout::k_header_bytes, &h->total_bytes, &h->growth_refused, &h->flags, &b);
    std::uint64_t head = 0, dropped = 0, size_word = 0;
    layout::extent dir[layout::k_max_extents] = {};
    std::atomic<std::int64_t> budget(budget_records);
    seq_ring ring;
    ASSERT_TRUE(ring.open(&space, dir, 16, 4, 8, &head, &dropped, true, &size_word, &budget));
    std::uint64_t w[8] = {};
    auto append_to = [&](std::uint64_t seq) {
      while (head < seq)
        ring.append_owned(w);
    };
    const std::uint64_t end0 = h->total_bytes; // chunk 0 allocated
    append_to(3);
    EXPECT_TRUE(b.announced.empty());
    append_to(4); // index 3: the last quarter of chunk 0 -> chunk 1, 4 records
    ASSERT_EQ(b.announced.size(), 1u);
    EXPECT_EQ(b.announced[0], end0 + 4 * 64);
    append_to(7); // index 4 opened chunk 1 (the announced bytes)
    EXPECT_EQ(h->total_bytes, end0 + 4 * 64);
    EXPECT_EQ(b.announced.size(), 1u);
    append_to(8); // index 7: the last quarter of chunk 1 -> chunk 2, 8 records, if the budget
                  // allows it
    if (budget_records == 1000) {
      ASSERT_EQ(b.announced.size(), 2u);
      EXPECT_EQ(b.announced[1], end0 + 4 * 64 + 8 * 64);
    } else {
      EXPECT_EQ(b.announced.size(), 1u);
    }
    append_to(40); // at its capacity (16) or wrapped early: nothing more to announce
    EXPECT_EQ(b.announced.size(), budget_records == 1000 ? 2u : 1u);
    EXPECT_EQ(size_word, budget_records == 1000 ? 16u : 8u);
  }
}

// A chunk the trace had to make on the writing thread (the helper had not backed it yet) makes
// the ring announce the next one twice as early, down to the chunk's start; a helper that keeps
// up leaves the lead at a quarter.
struct slow_backing final : trace_backing {
  std::vector<std::uint64_t> announced;
  std::uint64_t ready = 0; // what the helper has backed: nothing unless a test says so
  bool grow(std::uint64_t) noexcept override { return true; }
  void prepare(std::uint64_t total) noexcept override { announced.push_back(total); }
  bool backed(std::uint64_t total) const noexcept override { return total <= ready; }
};

// An owned ring of 64 records from a first chunk of 4, over `b`.
struct lead_fixture {
  explicit lead_fixture(std::uint64_t helper_ready) {
    b.ready = helper_ready;
    EXPECT_TRUE(ring.open(&space, dir, 64, 4, 8, &head, &dropped, true, &size_word, &budget));
  }
  // Fills the ring; the index of the record each announcement came with, in order.
  std::vector<std::uint64_t> announcement_indices() {
    std::vector<std::uint64_t> at;
    std::uint64_t w[8] = {};
    while (head < 64) {
      const std::size_t before = b.announced.size();
      ring.append_owned(w);
      if (b.announced.size() != before) at.push_back(head - 1);
    }
    return at;
  }
  std::vector<std::uint64_t> memory = std::vector<std::uint64_t>(1 << 16, 0);
  layout::header* h = reinterpret_cast<layout::header*>(memory.data());
  slow_backing b;
  trace_space space{reinterpret_cast<std::byte*>(memory.data()),
                    memory.size() * 8,
                    layout::k_header_bytes,
                    &h->total_bytes,
                    &h->growth_refused,
                    &h->flags,
                    &b};
  std::uint64_t head = 0, dropped = 0, size_word = 0;
  layout::extent dir[layout::k_max_extents] = {};
  std::atomic<std::int64_t> budget{1000};
  seq_ring ring;
};

TEST(seq_ring, owned_ring_announces_earlier_after_a_late_chunk) {
  lead_fixture f(0);
  // Chunk 0 (indices 0-3): a quarter of it ahead (index 3). Chunk 1 (4-7) came late: half of
  // it (index 6). Chunk 2 (8-15) late again: at its start (index 8), and from then on
  // (chunk 3, 16-31: index 16).
  EXPECT_EQ(f.announcement_indices(), (std::vector<std::uint64_t>{3, 6, 8, 16}));
  EXPECT_EQ(f.size_word, 64u);
  // Every chunk announced once, in its order, with its size.
  const std::uint64_t end0 = layout::k_header_bytes + 4 * 64;
  EXPECT_EQ(f.b.announced, (std::vector<std::uint64_t>{end0 + 4 * 64, end0 + 12 * 64,
                                                       end0 + 28 * 64, end0 + 60 * 64}));
}

TEST(seq_ring, owned_ring_keeps_its_lead_when_the_helper_keeps_up) {
  lead_fixture f(~std::uint64_t{0});
  // A quarter of each chunk ahead.
  EXPECT_EQ(f.announcement_indices(), (std::vector<std::uint64_t>{3, 7, 14, 28}));
}

TEST(seq_ring, owned_record_being_rewritten_is_not_read) {
  owned_fixture f(8, 8, 100);
  for (std::uint64_t i = 1; i <= 3; ++i)
    f.append(i);
  const ring_view v = f.view();
  std::uint64_t out[8];
  ASSERT_TRUE(v.read(2, out));
  // The writer died after marking slot 1 for seq 10 (2 * 10 - 1) and before its words.
  f.space.words(f.dir[0].offset)[8] = 2 * 10 - 1;
  EXPECT_FALSE(v.read(2, out));
  EXPECT_FALSE(v.read(10, out));
}

TEST(seq_ring, seqs_present_skips_missing_chunks_and_hostile_heads) {
  ring_fixture f(64, 4, layout::k_header_bytes + 4 * 64 + 4 * 64); // chunks 0 and 1 only
  for (std::uint64_t i = 1; i <= 6; ++i)
    f.append(i);
  ring_view v;
  std::uint64_t corrupt = 0;
  const char* problem = nullptr;
  ASSERT_TRUE(v.open(f.base(), f.size(), f.h->sections[layout::k_events],
                     f.h->extents[layout::k_events], 8, &corrupt, &problem));
  EXPECT_EQ(v.seqs_present(1, 6), (std::vector<std::uint64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_TRUE(v.seqs_present(0, 6).empty());
  EXPECT_TRUE(v.seqs_present(7, 6).empty());
  // A head near 2^64: the 8 slots of the two chunks there, not 64 seqs (or 2^64).
  const std::uint64_t last = ~0ull - 3;
  const auto seqs = v.seqs_present(last - 63, last);
  EXPECT_EQ(seqs.size(), 8u);
  for (std::uint64_t seq : seqs)
    EXPECT_LT((seq - 1) & 63, 8u);
}

} // namespace
} // namespace gmem::trace
