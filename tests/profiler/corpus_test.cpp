// The committed fuzz seeds (tests/fuzz/corpus/trace_reader, written by make_corpus) decode to
// exactly the result each one was made for: valid ones to traces, damaged ones to errors that
// name the right byte.
#include <fstream>
#include <gtest/gtest.h>
#include <iterator>
#include <string>
#include <vector>

#include "profiler/reader/trace_reader.h"

namespace gmem::trace {
namespace {

read_result seed(const std::string& name) {
  std::ifstream f(std::string(GMEM_FUZZ_CORPUS) + "/" + name, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_FALSE(bytes.empty()) << name;
  return decode(
      std::span<const std::byte>(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()));
}

TEST(corpus, valid_seeds_decode) {
  for (const char* name :
       {"valid_empty", "valid_every_kind", "valid_exited", "valid_wrapped_and_overflowed",
        "valid_grown", "valid_python", "valid_threads", "hostile_heads", "hostile_refs",
        "hostile_extents", "hostile_lane", "torn_records", "v3_valid_every_kind",
        "v3_valid_wrapped_and_overflowed", "v3_valid_grown", "v3_hostile_heads",
        "v3_hostile_extents", "v3_torn_records"}) {
    const read_result r = seed(name);
    EXPECT_TRUE(r) << name << ": " << r.error.to_string();
  }
  const read_result every = seed("valid_every_kind");
  EXPECT_EQ(every.value.events.size(), 12u);
  EXPECT_EQ(every.value.live.size(), 4u);
  EXPECT_EQ(every.value.modules.size(), 1u);
  EXPECT_EQ(every.value.modules[0].build_id, "1234");
  for (const char* name : {"valid_wrapped_and_overflowed", "v3_valid_wrapped_and_overflowed"}) {
    const read_result wrapped = seed(name);
    EXPECT_EQ(wrapped.value.events.size(), 64u) << name;
    EXPECT_EQ(wrapped.value.losses.live_overflow, 16u) << name;
    EXPECT_GT(wrapped.value.losses.history_from_ns, 0u) << name; // the oldest events are gone
  }
  // Format 3's single ring reads as before: in seq order, complete from the start.
  const read_result v3 = seed("v3_valid_every_kind");
  EXPECT_EQ(v3.value.info.format_version, 3u);
  EXPECT_EQ(v3.value.events.size(), 12u);
  EXPECT_EQ(v3.value.events.front().seq, 1u);
  EXPECT_EQ(v3.value.losses.history_from_ns, 0u);
  // Three threads' events: one timeline, in stamp order, numbered 1..n.
  const read_result threads = seed("valid_threads");
  ASSERT_EQ(threads.value.events.size(), 1u + 3 + 1 + 1 + 1 + 1 + 1 + 1 + 8 + 1);
  for (std::size_t i = 0; i < threads.value.events.size(); ++i) {
    EXPECT_EQ(threads.value.events[i].seq, i + 1);
    if (i > 0) {
      EXPECT_LE(threads.value.events[i - 1].time_ns, threads.value.events[i].time_ns);
    }
  }
  EXPECT_EQ(threads.value.events.back().label, "main again");
  EXPECT_EQ(threads.value.events[threads.value.events.size() - 2].label, "thread 1 3");
  EXPECT_EQ(seed("valid_exited").value.info.state, trace_state::exited);
  const read_result py = seed("valid_python");
  ASSERT_EQ(py.value.python_stacks.size(), 2u);
  bool named = false; // the live allocation made with the Python stack
  for (const auto& a : py.value.live)
    if (const auto* p = py.value.python(a.stack_id); p && !p->frames.empty())
      named = py.value.location(p->frames[0]).function == "step" && p->frames[0].line == 88;
  EXPECT_TRUE(named);
  const read_result grown = seed("valid_grown");
  EXPECT_EQ(grown.value.live.size(), 149u);
  EXPECT_EQ(grown.value.losses.live_overflow, 0u);
  EXPECT_EQ(grown.value.losses.torn_records, 0u);
  EXPECT_GE(grown.value.stacks.size(), 41u);
  EXPECT_EQ(grown.value.events.size() + grown.value.losses.lost_events,
            grown.value.losses.last_seq);
}

TEST(corpus, hostile_values_are_contained) {
  const read_result heads = seed("hostile_heads");
  EXPECT_LE(heads.value.events.size(), 64u);
  EXPECT_EQ(heads.value.losses.last_seq, ~0ull);
  EXPECT_LE(heads.value.modules.size(), 16u);
  const read_result refs = seed("hostile_refs");
  for (const auto& a : refs.value.live)
    EXPECT_EQ(refs.value.stack(a.stack_id) != nullptr, a.stack_id != 0);
  // Overlapping string ranges: the first one wins, the rest are refused.
  const read_result overlap = seed("overlapping_string_ranges");
  ASSERT_TRUE(overlap) << overlap.error.to_string();
  EXPECT_LE(overlap.value.info.command_line.size(), 4096u);
  const read_result extents = seed("hostile_extents");
  EXPECT_LE(extents.value.live.size(), 5u);
  EXPECT_GT(extents.value.losses.torn_records, 0u);
  for (const char* name : {"torn_records", "v3_torn_records"}) {
    const read_result torn = seed(name);
    EXPECT_TRUE(torn.value.live.empty()) << name;
    EXPECT_GE(torn.value.losses.torn_records, 16u) << name; // every slot of the one live table
    EXPECT_EQ(torn.value.losses.lost_events, 1u) << name;
  }
  // A lane of 2^40 records, none of its 24 chunks inside the trace, its head near 2^63: read
  // as lost without visiting 2^40 seqs (the test would time out).
  const read_result lane = seed("hostile_lane");
  EXPECT_EQ(lane.value.losses.torn_records, 24u);
  EXPECT_TRUE(lane.value.events.empty());
  EXPECT_EQ(lane.value.losses.last_seq, ~0ull >> 1);
}

TEST(corpus, damaged_seeds_fail_at_the_right_byte) {
  struct want {
    const char* name;
    std::uint64_t offset;
    const char* text;
  };
  for (const want& w :
       {want{"truncated_body", 16, "truncated"},
        want{"truncated_header", 100, "shorter than its 8192-byte header"},
        want{"other_version", 8, "trace format version 6, this gmem reads versions 2 to 5"},
        want{"unwritten_header", 0, "not written yet"},
        want{"hostile_capacity", 128 + 3 * 32, "capacity"},
        want{"hostile_offset", 4096, "not inside the trace"},
        want{"hostile_extent_count", 128 + 1 * 32 + 12, "extent count"},
        want{"hostile_stat_count", 72, "out of range"}, want{"bad_event_type", 0, "unknown type"},
        want{"v3_hostile_capacity", 128 + 3 * 32, "capacity"},
        want{"v3_bad_event_type", 0, "unknown type"},
        want{"unused_lane_with_head", 0, "event lane 2 is unused but has a head"},
        want{"garbage_with_magic", 8, "version"}}) {
    const read_result r = seed(w.name);
    ASSERT_FALSE(r) << w.name;
    if (w.offset != 0 || std::string(w.name) == "unwritten_header") {
      EXPECT_EQ(r.error.offset, w.offset) << w.name << ": " << r.error.to_string();
    }
    EXPECT_NE(r.error.message.find(w.text), std::string::npos) << w.name << ": " << r.error.message;
  }
}

} // namespace
} // namespace gmem::trace
