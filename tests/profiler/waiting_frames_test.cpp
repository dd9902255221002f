// Python frames lent to an engine's worker threads (profiler/recorder/waiting_frames.h): the
// registry alone (latest waiter, count, one writer's words only, full slots), the naming rule
// of PyTorch's autograd threads, and through the writer: a capture on a thread named
// pt_autograd_0 carries the waiter's frames behind the lent note, which the reader decodes;
// a capture on any other thread does not.
#include <pthread.h>

#include <gtest/gtest.h>
#include <thread>
#include <vector>

#include "profiler/format/trace_layout.h"
#include "profiler/reader/trace_reader.h"
#include "profiler/recorder/waiting_frames.h"
#include "tests/profiler/test_buffer.h"

namespace gmem::trace {
namespace {

namespace pw = layout::python_word;
using testing::trace_buffer;

std::vector<std::uint64_t> lend_all(const waiting_frames& w, const void* ctx, unsigned* waiting) {
  std::uint64_t out[waiting_frames::k_max_words];
  const auto got = w.lend(out, waiting_frames::k_max_words, ctx);
  if (waiting) *waiting = got.waiting;
  return {out, out + got.words};
}

TEST(waiting_frames, lends_the_latest_waiter_of_its_writer) {
  static waiting_frames w; // static: 8 KiB of atomics
  int writer = 0, other = 0;
  unsigned waiting = 0;
  EXPECT_FALSE(w.any());
  EXPECT_TRUE(lend_all(w, &writer, &waiting).empty());
  const std::uint64_t first[] = {pw::frame(1, 10), pw::frame(2, 20)};
  const std::uint64_t second[] = {pw::frame(3, 30)};
  const std::uint32_t a = w.begin(wait_kind::backward, first, 2, &writer);
  ASSERT_NE(a, 0u);
  EXPECT_TRUE(w.any());
  EXPECT_EQ(lend_all(w, &writer, &waiting), std::vector<std::uint64_t>(first, first + 2));
  EXPECT_EQ(waiting, 1u);
  const std::uint32_t b = w.begin(wait_kind::backward, second, 1, &writer);
  ASSERT_NE(b, 0u);
  EXPECT_EQ(lend_all(w, &writer, &waiting), std::vector<std::uint64_t>(second, second + 1));
  EXPECT_EQ(waiting, 2u);
  // Another writer's words are ids of another string table: never lent to this one.
  EXPECT_TRUE(lend_all(w, &other, nullptr).empty());
  w.end(b);
  EXPECT_EQ(lend_all(w, &writer, &waiting), std::vector<std::uint64_t>(first, first + 2));
  EXPECT_EQ(waiting, 1u);
  // The slot b had is reused by the next waiter, which is the latest again.
  const std::uint32_t c = w.begin(wait_kind::backward, second, 1, &writer);
  EXPECT_EQ(lend_all(w, &writer, nullptr), std::vector<std::uint64_t>(second, second + 1));
  w.end(c);
  w.end(a);
  EXPECT_FALSE(w.any());
  EXPECT_TRUE(lend_all(w, &writer, nullptr).empty());
  // Out of `max`, the innermost frames.
  const std::uint32_t d = w.begin(wait_kind::backward, first, 2, &writer);
  std::uint64_t one[1];
  EXPECT_EQ(w.lend(one, 1, &writer).words, 1u);
  EXPECT_EQ(one[0], first[0]);
  w.end(d);
}

TEST(waiting_frames, full_slots_and_empty_registrations_register_nothing) {
  static waiting_frames w;
  int writer = 0;
  const std::uint64_t words[] = {pw::frame(1, 1)};
  EXPECT_EQ(w.begin(wait_kind::backward, words, 0, &writer), 0u); // no Python frames
  std::vector<std::uint32_t> tokens;
  for (unsigned i = 0; i < waiting_frames::k_slots; ++i)
    tokens.push_back(w.begin(wait_kind::backward, words, 1, &writer));
  for (const auto t : tokens)
    EXPECT_NE(t, 0u);
  EXPECT_EQ(w.begin(wait_kind::backward, words, 1, &writer), 0u);
  w.end(0); // what the bootstrap passes back for "not registered": ignored
  w.end(waiting_frames::k_slots + 1);
  unsigned waiting = 0;
  lend_all(w, &writer, &waiting);
  EXPECT_EQ(waiting, waiting_frames::k_slots);
  for (const auto t : tokens)
    w.end(t);
  w.end(tokens[0]); // twice: no harm
  EXPECT_FALSE(w.any());
}

TEST(waiting_frames, pytorch_autograd_threads_by_name) {
  EXPECT_TRUE(is_worker_name(wait_kind::backward, "pt_autograd_0"));
  EXPECT_TRUE(is_worker_name(wait_kind::backward, "pt_autograd_12"));
  EXPECT_FALSE(is_worker_name(wait_kind::backward, "pt_autograd_"));
  EXPECT_FALSE(is_worker_name(wait_kind::backward, "python3"));
  EXPECT_FALSE(is_worker_name(wait_kind::backward, "pt_main_thread"));
  EXPECT_FALSE(is_worker_name(wait_kind::backward, nullptr));
  bool named = false, unnamed = true;
  std::thread([&] {
    pthread_setname_np(pthread_self(), "pt_autograd_0");
    named = is_worker_thread(wait_kind::backward);
  }).join();
  std::thread([&] { unnamed = is_worker_thread(wait_kind::backward); }).join();
  EXPECT_TRUE(named);
  EXPECT_FALSE(unnamed);
}

// Through the writer and the reader: what an autograd thread's allocation records while a
// Python thread waits in backward().
TEST(waiting_frames, an_autograd_threads_capture_carries_the_waiters_frames) {
  trace_buffer b;
  const std::uint32_t where = b.writer->intern_string(std::string("/app/train.py") + '\0' + "step");
  ASSERT_NE(where, 0u);
  const std::uint64_t waiter[] = {pw::frame(where, 42), pw::frame(where, 7)};
  waiting_frames& registry = process_waiting_frames();
  const std::uint32_t token = registry.begin(wait_kind::backward, waiter, 2, b.writer.get());
  ASSERT_NE(token, 0u);
  auto capture_on = [&](const char* name) {
    std::uint32_t id = 0;
    std::thread([&] {
      pthread_setname_np(pthread_self(), name);
      id = b.writer->capture_stack(0);
    }).join();
    return id;
  };
  const std::uint32_t worker = capture_on("pt_autograd_0");
  const std::uint32_t loader = capture_on("data_loader");
  registry.end(token);
  const std::uint32_t after = capture_on("pt_autograd_1");
  const read_result r = decode(b.bytes());
  ASSERT_TRUE(r) << r.error.to_string();
  const auto* py = r.value.python(worker);
  ASSERT_NE(py, nullptr);
  EXPECT_EQ(py->lender, python_lender::backward);
  EXPECT_EQ(py->lent_from, 0u); // no Python frames of its own (no interpreter in this test)
  EXPECT_EQ(py->waiting, 1u);
  ASSERT_EQ(py->frames.size(), 2u);
  EXPECT_EQ(py->frames[0].line, 42u);
  EXPECT_EQ(r.value.location(py->frames[0]).function, "step");
  EXPECT_EQ(py->frames[1].line, 7u);
  for (const std::uint32_t id : {loader, after}) {
    const auto* none = r.value.python(id);
    if (none != nullptr) {
      EXPECT_EQ(none->lender, python_lender::none);
      EXPECT_TRUE(none->frames.empty());
    }
  }
}

} // namespace
} // namespace gmem::trace
