// Writer -> reader over plain buffers and files: everything the writer records comes back.
#include <cstdio>
#include <cstring>
#include <gtest/gtest.h>
#include <set>
#include <thread>
#include <unistd.h>

#include "profiler/format/trace_layout.h"
#include "profiler/reader/trace_open.h"
#include "profiler/reader/trace_reader.h"
#include "profiler/reader/trace_save.h"
#include "profiler/recorder/stack_capture.h"
#include "tests/profiler/test_buffer.h"

namespace gmem::trace {
namespace {

using testing::small_config;
using testing::trace_buffer;

read_result decode_buffer(const trace_buffer& b) {
  return decode(b.bytes());
}

TEST(trace_round_trip, header_and_identity) {
  trace_buffer b;
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r) << r.error.to_string();
  const trace_info& info = r.value.info;
  EXPECT_EQ(info.format_version, k_format_version);
  EXPECT_EQ(info.pid, 4242u);
  EXPECT_EQ(info.proc_start_ticks, 777u);
  EXPECT_EQ(info.command_line, "prog --flag x");
  ASSERT_EQ(info.argv.size(), 3u);
  ASSERT_EQ(info.options.size(), 2u);
  EXPECT_EQ(info.options[0].first, "GMEM_LIMIT");
  EXPECT_EQ(info.options[0].second, "1G");
  EXPECT_EQ(info.stack_depth, 8u);
  EXPECT_EQ(info.state, trace_state::crashed); // never shut down, decoded from bytes
  EXPECT_EQ(info.live_capacity, 256u);
  EXPECT_EQ(info.event_capacity, 64u);
  b.writer->mark_shutdown();
  EXPECT_EQ(decode_buffer(b).value.info.state, trace_state::exited);
}

// A stitched range is a segment flagged as such, in its events (size2) and in the live
// segment table; ordinary segments carry no flag.
TEST(trace_round_trip, a_stitched_range_is_a_flagged_segment) {
  trace_buffer b;
  trace_writer& w = *b.writer;
  w.segment(true, 0x7f0000000000, 16 << 20, 0);
  w.segment(true, 0x7e0000000000, 8 << 20, 0, true);
  w.segment(true, 0x7d0000000000, 4 << 20, 0, true);
  w.segment(false, 0x7d0000000000, 4 << 20, 0, true);
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r) << r.error.to_string();
  const trace& t = r.value;
  ASSERT_EQ(t.events.size(), 4u);
  EXPECT_EQ(t.events[0].size2, 0u);
  EXPECT_EQ(t.events[1].size2, k_segment_stitched);
  EXPECT_EQ(t.events[3].type, event_type::segment_unmap);
  EXPECT_EQ(t.events[3].size2, k_segment_stitched);
  ASSERT_EQ(t.segments.size(), 2u); // by base: the stitched range first
  EXPECT_EQ(t.segments[0].base, 0x7e0000000000u);
  EXPECT_TRUE(t.segments[0].stitched);
  EXPECT_EQ(t.segments[0].bytes, 8u << 20);
  EXPECT_FALSE(t.segments[1].stitched);
}

TEST(trace_round_trip, every_event_kind) {
  trace_buffer b;
  trace_writer& w = *b.writer;
  const std::uintptr_t ips[] = {0x1111, 0x2222, 0x3333};
  const std::uint32_t stack = w.intern_stack(ips, 3);
  ASSERT_NE(stack, 0u);
  w.segment(true, 0x7f0000000000, 2 << 20, 0);
  w.alloc(0x7f0000000000, 1000, 1024, 0, 5, alloc_kind::async, stack);
  w.alloc(0x7f0000000400, 3000, 3072, 0, ~std::uintptr_t{0}, alloc_kind::device, 0);
  w.free(0x7f0000000000, 0, 5, alloc_kind::async);
  w.fence(0, 12345, 4096);
  w.trim(0, 2 << 20);
  pool_stats at_oom;
  at_oom.free_bytes = 1000;
  at_oom.largest_free_block = 100;
  w.oom(1, 1 << 30, at_oom);
  w.marker("epoch 3");
  w.option("GMEM_LIMIT", "2G");
  w.segment(false, 0x7f0000000000, 2 << 20, 0);
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r) << r.error.to_string();
  const trace& t = r.value;
  ASSERT_EQ(t.events.size(), 10u);
  EXPECT_EQ(t.losses.lost_events, 0u);
  EXPECT_EQ(t.losses.last_seq, 10u);
  const event& a = t.events[1];
  EXPECT_EQ(a.seq, 2u);
  EXPECT_EQ(a.type, event_type::alloc);
  EXPECT_EQ(a.address, 0x7f0000000000u);
  EXPECT_EQ(a.size, 1000u);
  EXPECT_EQ(a.size2, 1024u);
  EXPECT_EQ(a.stream, 5u);
  EXPECT_EQ(a.kind, alloc_kind::async);
  EXPECT_EQ(a.stack_id, stack);
  EXPECT_EQ(a.thread, static_cast<std::uint32_t>(gettid()));
  const event& f = t.events[3];
  EXPECT_EQ(f.type, event_type::free);
  EXPECT_EQ(f.size, 1000u); // from the live table
  EXPECT_EQ(f.size2, 1024u);
  EXPECT_EQ(t.events[4].type, event_type::fence);
  EXPECT_EQ(t.events[4].size, 4096u);
  EXPECT_EQ(t.events[4].size2, 12345u);
  EXPECT_EQ(t.events[5].type, event_type::trim);
  const event& oom = t.events[6];
  EXPECT_EQ(oom.type, event_type::oom);
  EXPECT_EQ(oom.device, 1);
  EXPECT_EQ(oom.size, 1u << 30);
  ASSERT_EQ(t.samples.size(), 1u);
  EXPECT_EQ(oom.size2, t.samples[0].seq);
  EXPECT_EQ(t.samples[0].reason, sample_reason::oom);
  EXPECT_EQ(t.samples[0].stats.largest_free_block, 100u);
  EXPECT_DOUBLE_EQ(t.samples[0].stats.fragmentation(), 0.9);
  EXPECT_EQ(t.events[7].label, "epoch 3");
  EXPECT_EQ(t.events[8].type, event_type::option);
  EXPECT_EQ(t.events[8].label, "GMEM_LIMIT=2G");
  EXPECT_EQ(t.events[9].type, event_type::segment_unmap);
  // Live state: one allocation left, no segment.
  ASSERT_EQ(t.live.size(), 1u);
  EXPECT_EQ(t.live[0].address, 0x7f0000000400u);
  EXPECT_EQ(t.live[0].requested, 3000u);
  EXPECT_EQ(t.live[0].rounded, 3072u);
  EXPECT_EQ(t.live[0].stream, ~std::uintptr_t{0});
  EXPECT_TRUE(t.segments.empty());
  ASSERT_NE(t.stack(stack), nullptr);
  EXPECT_EQ(*t.stack(stack), (std::vector<std::uintptr_t>{0x1111, 0x2222, 0x3333}));
  for (std::size_t i = 1; i < t.events.size(); ++i)
    EXPECT_GE(t.events[i].time_ns, t.events[i - 1].time_ns);
  EXPECT_TRUE(w.is_valid());
}

TEST(trace_round_trip, counters_and_samples) {
  trace_buffer b;
  device_stats s[2] = {};
  s[0].device = 0;
  s[0].stats.live_bytes = 111;
  s[0].stats.invalid_frees = 3;
  s[1].device = -1;
  s[1].stats.reserved_bytes = 222;
  b.writer->sample(s, 2, sample_reason::periodic);
  s[0].stats.live_bytes = 333;
  b.writer->sample(s, 1, sample_reason::final);
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r) << r.error.to_string();
  ASSERT_EQ(r.value.devices.size(), 2u);
  EXPECT_EQ(r.value.devices[0].device, -1);
  EXPECT_EQ(r.value.devices[0].stats.reserved_bytes, 222u);
  EXPECT_EQ(r.value.devices[1].stats.live_bytes, 333u); // latest
  EXPECT_EQ(r.value.devices[1].stats.invalid_frees, 3u);
  EXPECT_TRUE(r.value.devices[1].missing.empty());
  ASSERT_EQ(r.value.samples.size(), 3u);
  EXPECT_EQ(r.value.samples[2].reason, sample_reason::final);
  EXPECT_EQ(r.value.samples[2].stats.live_bytes, 333u);
}

// gmem's own time observing tensors: kept per thread, read back added up, in ns, and the same
// as the writer's own total.
TEST(trace_round_trip, observation_cost) {
  trace_buffer b;
  trace_writer& w = *b.writer;
  EXPECT_EQ(decode_buffer(b).value.observed.allocs, 0u); // nothing observed: all zero
  auto observe = [&w](bool alloc, std::uint64_t spin_ns) {
    const std::uint64_t since = now_ticks();
    if (alloc)
      w.alloc(0x1000, 64, 512, 0, 0, alloc_kind::tensor, 0);
    else
      w.free(0x1000, 0, 0, alloc_kind::tensor);
    for (const std::uint64_t t0 = monotonic_ns(); monotonic_ns() - t0 < spin_ns;) {
    }
    w.observed(alloc, since);
  };
  for (int i = 0; i < 3; ++i) {
    observe(true, 200'000);
    observe(false, 100'000);
  }
  std::thread([&] { observe(true, 200'000); }).join(); // another thread, another lane
  w.heartbeat();                                       // the clock calibration
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r) << r.error.to_string();
  const observe_cost& o = r.value.observed;
  EXPECT_EQ(o.allocs, 4u);
  EXPECT_EQ(o.frees, 3u);
  EXPECT_GE(o.alloc_ns, 4 * 200'000u);
  EXPECT_LT(o.alloc_ns, 4 * 200'000u + 200'000'000u); // a loaded machine, not a wrong unit
  EXPECT_GE(o.free_ns, 3 * 100'000u);
  EXPECT_LT(o.free_ns, o.alloc_ns);
  const observe_cost mine = w.observed_cost();
  EXPECT_EQ(mine.allocs, o.allocs);
  EXPECT_NEAR(static_cast<double>(mine.alloc_ns), static_cast<double>(o.alloc_ns),
              0.01 * static_cast<double>(o.alloc_ns));
}

// Readers decode only what a writer makes: one counter record per device, device ids a
// writer records (-1 to 1023), no more counter records or samples than a writer keeps. A
// forged trace with a new device id in each of 65,536 counter records used to cost a scrape a
// million series and root's `gmem ps` gigabytes.
TEST(trace_round_trip, counters_and_samples_only_as_a_writer_makes_them) {
  trace_buffer b;
  device_stats s[2] = {};
  s[0].device = 0;
  s[1].device = -1;
  b.writer->sample(s, 2, sample_reason::periodic);
  ASSERT_TRUE(decode_buffer(b));
  const std::vector<std::byte> good(b.bytes().begin(), b.bytes().end());
  const auto* h = reinterpret_cast<const layout::header*>(good.data());
  const std::uint64_t counters = h->extents[layout::k_counters][0].offset;
  const std::uint32_t record = h->sections[layout::k_counters].record_bytes;
  const std::uint64_t samples = h->extents[layout::k_samples][0].offset;
  auto with = [&](std::uint64_t at, std::uint32_t device) {
    std::vector<std::byte> copy = good;
    std::memcpy(copy.data() + at + 8 * layout::stat_word::device_reason, &device, 4);
    return decode(copy);
  };
  // Record 1 (the host pool) claims device 0, -2, 1024: refused, naming the record.
  for (const std::uint32_t device : {0u, 0xfffffffeu, 1024u, 0x80000000u}) {
    const read_result r = with(counters + record, device);
    ASSERT_FALSE(r) << device;
    EXPECT_EQ(r.error.offset, counters + record + 16);
    EXPECT_NE(r.error.message.find("counter record 1"), std::string::npos) << r.error.message;
  }
  EXPECT_TRUE(with(counters + record, 1023u));
  // A sample on a device no writer records.
  const read_result bad_sample = with(samples, 5000u);
  ASSERT_FALSE(bad_sample);
  EXPECT_NE(bad_sample.error.message.find("sample 1 names device 5000"), std::string::npos);
  EXPECT_TRUE(decode(good, {.samples = false})) << "the light read does not decode samples";
  // More counter records, or samples, than a writer makes.
  std::vector<std::byte> big = good;
  auto* bh = reinterpret_cast<layout::header*>(big.data());
  bh->sections[layout::k_counters].capacity = layout::k_max_device_slots + 1;
  bh->extents[layout::k_counters][0].capacity = layout::k_max_device_slots + 1;
  const read_result too_many = decode(big);
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error.offset, 128u);
  EXPECT_NE(too_many.error.message.find("over the 1024 records"), std::string::npos);
  big = good;
  bh = reinterpret_cast<layout::header*>(big.data());
  bh->sections[layout::k_samples].capacity = layout::k_max_samples * 2;
  EXPECT_NE(decode(big).error.message.find("section 4 capacity"), std::string::npos);
}

TEST(trace_round_trip, stat_lists_of_other_versions_map_by_name) {
  trace_buffer b;
  device_stats s{};
  s.device = 0;
  s.stats.live_bytes = 5;
  s.stats.reserved_bytes = 6;
  b.writer->sample(&s, 1, sample_reason::periodic);
  // Pretend the writer's list named its first counter differently (a newer or older list).
  auto* h = reinterpret_cast<layout::header*>(b.mutable_bytes());
  h->stat_names[0] = b.writer->intern_string("bytes_in_flight");
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r) << r.error.to_string();
  const device_counters& d = r.value.devices.at(0);
  EXPECT_EQ(d.stats.live_bytes, 0u);
  EXPECT_EQ(d.stats.reserved_bytes, 6u);
  ASSERT_EQ(d.unknown.size(), 1u);
  EXPECT_EQ(d.unknown[0].first, "bytes_in_flight");
  EXPECT_EQ(d.unknown[0].second, 5u);
  ASSERT_EQ(d.missing.size(), 1u);
  EXPECT_EQ(d.missing[0], "live_bytes");
}

TEST(trace_round_trip, wrap_around_reports_lost_events) {
  trace_buffer b; // 64 events
  for (std::size_t i = 1; i <= 200; ++i)
    b.writer->fence(0, 0, i);
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r);
  EXPECT_EQ(r.value.events.size(), 64u);
  EXPECT_EQ(r.value.events.front().size, 137u); // the last lap
  EXPECT_EQ(r.value.events.front().seq, 1u);
  EXPECT_EQ(r.value.losses.lost_events, 136u);
  EXPECT_EQ(r.value.losses.last_seq, 200u);
  EXPECT_EQ(r.value.losses.history_from_ns, std::max<std::uint64_t>(r.value.events[0].time_ns, 1));
}

TEST(trace_round_trip, live_overflow_is_reported) {
  trace_buffer b; // 256 live slots
  for (std::uintptr_t a = 1; a <= 300; ++a)
    b.writer->alloc(a << 12, 10, 512, 0, 0, alloc_kind::device, 0);
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r);
  EXPECT_EQ(r.value.live.size(), 256u);
  EXPECT_EQ(r.value.losses.live_overflow, 44u);
}

__attribute__((noinline)) std::uint32_t capture_here(trace_writer& w) {
  const std::uint32_t id = w.capture_stack(0);
  asm volatile("" ::: "memory"); // keep this frame: no tail call
  return id;
}

TEST(trace_round_trip, captured_stacks_and_modules) {
  trace_buffer b;
  b.writer->update_modules(scan_modules());
  std::uint32_t ids[2];
  volatile int calls = 2; // a real loop: one call site
  for (int i = 0; i < calls; ++i)
    ids[i] = capture_here(*b.writer);
  const std::uint32_t id = ids[0];
  ASSERT_NE(id, 0u);
  EXPECT_EQ(ids[1], id); // same call site, same stack
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r);
  const auto* ips = r.value.stack(id);
  ASSERT_NE(ips, nullptr);
  ASSERT_GE(ips->size(), 2u);
  // The innermost frame is inside capture_here, in the test executable.
  const auto here = reinterpret_cast<std::uintptr_t>(&capture_here);
  EXPECT_GE((*ips)[0], here);
  EXPECT_LT((*ips)[0], here + 256);
  const module* m = r.value.module_of((*ips)[0]);
  ASSERT_NE(m, nullptr);
  EXPECT_NE(m->path.find("profiler_test"), std::string::npos) << m->path;
  EXPECT_TRUE(m->loaded);
  EXPECT_FALSE(r.value.modules.empty());
}

TEST(trace_round_trip, modules_unloaded_stay_marked) {
  trace_buffer b;
  std::vector<module_info> mods(2);
  mods[0] = {"/usr/lib/a.so", 0x1000, 0x1000, 0x2000, std::string("\x01\xab", 2)};
  mods[1] = {"/usr/lib/b.so", 0x9000, 0x9000, 0x1000, ""};
  b.writer->update_modules(mods);
  mods.pop_back();
  b.writer->update_modules(mods);
  const read_result r = decode_buffer(b);
  ASSERT_TRUE(r);
  ASSERT_EQ(r.value.modules.size(), 2u);
  EXPECT_EQ(r.value.modules[0].build_id, "01ab");
  EXPECT_TRUE(r.value.modules[0].loaded);
  EXPECT_FALSE(r.value.modules[1].loaded);
  EXPECT_EQ(r.value.modules[1].path, "/usr/lib/b.so");
}

TEST(trace_round_trip, saved_file_reads_back) {
  trace_buffer b;
  b.writer->alloc(0x5000, 1, 512, 2, 0, alloc_kind::managed, 0);
  b.writer->mark_shutdown();
  const std::string path = ::testing::TempDir() + "/trace_rt_" + std::to_string(getpid()) + ".gmem";
  std::string error;
  ASSERT_TRUE(save_bytes(b.bytes(), path, false, &error)) << error;
  const read_result r = open_file(path);
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_TRUE(r.value.info.saved_file);
  EXPECT_EQ(r.value.info.state, trace_state::exited);
  ASSERT_EQ(r.value.live.size(), 1u);
  EXPECT_EQ(r.value.live[0].kind, alloc_kind::managed);
  EXPECT_EQ(r.value.live[0].device, 2);
  std::remove(path.c_str());
  EXPECT_FALSE(open_file(path)); // gone: an error, not a crash
}

TEST(trace_round_trip, tensors_beside_their_segment_and_the_observed_flag) {
  trace_buffer b;
  EXPECT_EQ(decode(b.bytes()).value.info.observed_frameworks, 0u);
  b.writer->mark_observed(observed_framework::pytorch);
  b.writer->alloc(0x7000000, 20u << 20, 20u << 20, 0, 0, alloc_kind::device, 0);
  b.writer->alloc(0x7000000, 4u << 20, 4u << 20, 0, 0, alloc_kind::tensor, 0);
  b.writer->alloc(0x7400000, 4u << 20, 4u << 20, 0, 0, alloc_kind::tensor, 0);
  b.writer->free(0x7000000, 0, 0, alloc_kind::tensor);
  read_result r = decode(b.bytes());
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.info.observed_frameworks, 1u);
  ASSERT_EQ(r.value.live.size(), 2u); // the segment and the second tensor
  std::uint64_t tensors = 0;
  for (const auto& a : r.value.live)
    if (a.kind == alloc_kind::tensor) tensors += a.requested;
  EXPECT_EQ(tensors, 4u << 20);
  EXPECT_EQ(r.value.events.back().kind, alloc_kind::tensor);
  EXPECT_EQ(r.value.events.back().size, 4u << 20); // the free found its tensor
  b.writer->mark_observed(observed_framework::pytorch, false);
  b.writer->mark_observed(observed_framework::cupy);
  EXPECT_EQ(decode(b.bytes()).value.info.observed_frameworks, 2u);
}

TEST(trace_round_trip, rejects_other_versions_by_name) {
  trace_buffer b;
  std::vector<std::byte> copy(b.bytes().begin(), b.bytes().end());
  for (const std::uint32_t v : {1u, 6u}) {
    std::memcpy(copy.data() + 8, &v, 4);
    const read_result r = decode(copy);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error.offset, 8u);
    EXPECT_EQ(r.error.message,
              "trace format version " + std::to_string(v) + ", this gmem reads versions 2 to 5");
  }
}

// Format 3: Python frames are tagged words after the native ips of a stack record.
TEST(trace_round_trip, python_frames_and_notes) {
  namespace pw = gmem::trace::layout::python_word;
  trace_buffer b;
  const std::string loc = std::string("/app/train.py") + '\0' + "Model.step";
  const std::uint32_t where = b.writer->intern_string(loc);
  ASSERT_NE(where, 0u);
  const std::uintptr_t mixed[] = {0x401000, 0x402000, pw::frame(where, 88), pw::frame(where, 12),
                                  pw::frame(999999, 7)};
  const std::uintptr_t no_gil[] = {0x401000, pw::note(pw::k_note_no_gil)};
  const std::uint32_t a = b.writer->intern_stack(mixed, 5), c = b.writer->intern_stack(no_gil, 2);
  const std::uintptr_t native[] = {0x403000};
  const std::uint32_t n = b.writer->intern_stack(native, 1);
  b.writer->alloc(0x7000, 64, 512, 0, 0, alloc_kind::device, a);
  const read_result r = decode(b.bytes());
  ASSERT_TRUE(r) << r.error.to_string();
  const auto& t = r.value;
  EXPECT_EQ(t.info.format_version, 5u);
  EXPECT_EQ(t.info.python_depth, 16u);
  ASSERT_NE(t.stack(a), nullptr);
  EXPECT_EQ(*t.stack(a), (std::vector<std::uintptr_t>{0x401000, 0x402000}));
  const auto* py = t.python(a);
  ASSERT_NE(py, nullptr);
  ASSERT_EQ(py->frames.size(), 3u);
  EXPECT_EQ(t.location(py->frames[0]).file, "/app/train.py");
  EXPECT_EQ(t.location(py->frames[0]).function, "Model.step");
  EXPECT_EQ(py->frames[0].line, 88u);
  EXPECT_EQ(py->frames[1].line, 12u);
  EXPECT_EQ(t.location(py->frames[2]).file, "?"); // unknown string id: named, not dropped
  EXPECT_EQ(py->note, gmem::trace::python_note::none);
  ASSERT_NE(t.python(c), nullptr);
  EXPECT_TRUE(t.python(c)->frames.empty());
  EXPECT_EQ(t.python(c)->note, gmem::trace::python_note::no_gil);
  EXPECT_EQ(t.python(n), nullptr);
  ASSERT_EQ(t.live.size(), 1u);
  EXPECT_EQ(t.live[0].stack_id, a);
}

// A thread that interns the same stack again gets its id back without the table (a memo of
// its last stack); a new writer, perhaps at the last one's address, stores it in its own trace.
TEST(trace_round_trip, a_stack_repeated_by_a_thread_keeps_its_id_in_each_trace) {
  const std::uintptr_t ips[] = {0x401000, 0x402000, 0x403000};
  const std::uintptr_t other[] = {0x401000, 0x402000, 0x403001};
  {
    trace_buffer a;
    const std::uint32_t first = a.writer->intern_stack(ips, 3);
    ASSERT_NE(first, 0u);
    EXPECT_EQ(a.writer->intern_stack(ips, 3), first);
    const std::uint32_t changed = a.writer->intern_stack(other, 3);
    const std::uint32_t shorter = a.writer->intern_stack(ips, 2);
    EXPECT_NE(changed, first);
    EXPECT_NE(shorter, first);
    EXPECT_NE(shorter, changed);
    EXPECT_EQ(a.writer->intern_stack(ips, 3), first);
  }
  for (int i = 0; i < 2; ++i) {
    trace_buffer b;
    const std::uint32_t id = b.writer->intern_stack(ips, 3);
    const read_result r = decode_buffer(b);
    ASSERT_TRUE(r) << r.error.to_string();
    ASSERT_NE(r.value.stack(id), nullptr);
    ASSERT_EQ(r.value.stack(id)->size(), 3u);
    for (std::size_t k = 0; k < 3; ++k)
      EXPECT_EQ((*r.value.stack(id))[k], ips[k]);
  }
}

// Format 2 traces (before Python frames) still read: no python_depth, no tagged words.
TEST(trace_round_trip, reads_format_2) {
  trace_buffer b;
  const std::uintptr_t ips[] = {0x401000, 0x402000};
  const std::uint32_t id = b.writer->intern_stack(ips, 2);
  std::vector<std::byte> copy(b.bytes().begin(), b.bytes().end());
  const std::uint32_t two = 2;
  std::memcpy(copy.data() + 8, &two, 4);
  const read_result r = decode(copy);
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.info.format_version, 2u);
  EXPECT_EQ(r.value.info.python_depth, 0u);
  ASSERT_NE(r.value.stack(id), nullptr);
  EXPECT_EQ(r.value.stack(id)->size(), 2u);
  EXPECT_TRUE(r.value.python_stacks.empty());
}

TEST(trace_round_trip, malformed_inputs_name_the_offset) {
  trace_buffer b;
  std::vector<std::byte> copy(b.bytes().begin(), b.bytes().end());
  EXPECT_FALSE(decode(std::span<const std::byte>(copy.data(), 100)));
  const read_result truncated = decode(std::span<const std::byte>(copy.data(), copy.size() - 64));
  ASSERT_FALSE(truncated);
  EXPECT_EQ(truncated.error.offset, 16u);
  auto* h = reinterpret_cast<layout::header*>(copy.data());
  h->sections[layout::k_events].capacity = 1ull << 60; // hostile count
  const read_result hostile = decode(copy);
  ASSERT_FALSE(hostile);
  EXPECT_EQ(hostile.error.offset, 128u + 3 * 32);
  EXPECT_NE(hostile.error.to_string().find("byte 224"), std::string::npos);
  std::vector<std::byte> garbage(8192, std::byte{0x5a});
  EXPECT_EQ(decode(garbage).error.message, "not a gmem trace (bad magic)");
}

// Every lane naming the one chunk of lane 1: the reader reads those bytes once per lane only
// while all lanes' chunks together fit in the trace, and counts the rest as lost.
TEST(trace_round_trip, lanes_that_alias_one_chunk_cost_no_more_than_the_trace) {
  writer_config c = small_config();
  c.events = 1024; // lanes of 512 events (32 KiB) first
  trace_buffer b(c);
  for (std::size_t i = 1; i <= 300; ++i)
    b.writer->fence(0, 0, i);
  std::vector<std::byte> copy(b.bytes().begin(), b.bytes().end());
  auto* h = reinterpret_cast<layout::header*>(copy.data());
  auto* table =
      reinterpret_cast<std::uint64_t*>(copy.data() + h->extents[layout::k_events][0].offset);
  const std::uint32_t lanes = static_cast<std::uint32_t>(h->extents[layout::k_events][0].capacity);
  ASSERT_EQ(lanes, 64u);
  std::uint32_t mine = 0; // the lane this thread wrote
  for (std::uint32_t n = 1; n < lanes && mine == 0; ++n)
    if (table[n * layout::lane_word::count + layout::lane_word::head] == 300) mine = n;
  ASSERT_NE(mine, 0u);
  for (std::uint32_t n = 1; n < lanes; ++n)
    std::memcpy(table + n * layout::lane_word::count, table + mine * layout::lane_word::count,
                layout::lane_word::count * 8);
  const read_result r = decode(copy);
  ASSERT_TRUE(r) << r.error.to_string();
  const std::uint64_t fit = copy.size() / (512 * 64); // copies of the chunk the trace can hold
  ASSERT_LT(fit, lanes - 1u);
  EXPECT_LE(r.value.events.size(), fit * 300);
  EXPECT_EQ(r.value.losses.last_seq, (lanes - 1u) * 300u);
  EXPECT_EQ(r.value.events.size() + r.value.losses.lost_events, r.value.losses.last_seq);
  EXPECT_GE(r.value.losses.torn_records, lanes - 1u - fit);
}

TEST(trace_round_trip, unaligned_input_decodes) {
  trace_buffer b;
  b.writer->marker("x");
  std::vector<std::byte> copy(b.bytes().size() + 1);
  std::memcpy(copy.data() + 1, b.bytes().data(), b.bytes().size());
  const read_result r = decode(std::span<const std::byte>(copy.data() + 1, b.bytes().size()));
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.events.size(), 1u);
}

TEST(trace_round_trip, concurrent_writers_with_a_live_reader) {
  writer_config c = small_config();
  c.live_slots = 1 << 12;
  c.events = 1 << 10;
  trace_buffer b(c);
  constexpr int k_threads = 4, k_pairs = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < k_threads; ++t)
    threads.emplace_back([&b, t] {
      const std::uintptr_t ips[] = {0x10, static_cast<std::uintptr_t>(t)};
      const std::uint32_t stack = b.writer->intern_stack(ips, 2);
      for (int i = 0; i < k_pairs; ++i) {
        const std::uintptr_t a = (static_cast<std::uintptr_t>(t + 1) << 32) | (i + 1) << 9;
        b.writer->alloc(a, static_cast<std::size_t>(i), 512, t, 0, alloc_kind::device, stack);
        if (i % 10 != 0) b.writer->free(a, t, 0, alloc_kind::device);
      }
    });
  std::thread reader([&] {
    for (int pass = 0; pass < 10; ++pass) {
      // The whole mapping: the trace may grow between a look at its size and the decode.
      const read_result r = decode(b.all_bytes());
      ASSERT_TRUE(r) << r.error.to_string();
      for (const auto& a : r.value.live) {
        EXPECT_EQ(a.requested, ((a.address & 0xffffffffu) >> 9) - 1);
        EXPECT_EQ(static_cast<std::uintptr_t>(a.device), (a.address >> 32) - 1);
      }
      EXPECT_EQ(r.value.events.size() + r.value.losses.lost_events, r.value.losses.last_seq);
    }
  });
  for (auto& t : threads)
    t.join();
  reader.join();
  const read_result r = decode(b.bytes());
  ASSERT_TRUE(r);
  EXPECT_EQ(r.value.live.size(), static_cast<std::size_t>(k_threads * k_pairs / 10));
  EXPECT_EQ(r.value.losses.last_seq, static_cast<std::uint64_t>(k_threads) * (k_pairs * 2 - 500));
  EXPECT_EQ(r.value.losses.unmatched_frees, 0u);
  EXPECT_EQ(r.value.stacks.size(), 4u);
  EXPECT_TRUE(b.writer->is_valid());
  // Two threads had lanes of their own, two shared lane 0; merged, the events are one timeline
  // in which each address is allocated before it is freed.
  std::set<std::uintptr_t> allocated;
  for (std::size_t i = 0; i < r.value.events.size(); ++i) {
    const event& e = r.value.events[i];
    EXPECT_EQ(e.seq, i + 1);
    if (i > 0) {
      EXPECT_LE(r.value.events[i - 1].time_ns, e.time_ns);
    }
    if (e.type == event_type::alloc) allocated.insert(e.address);
    if (e.type == event_type::free && allocated.count(e.address) == 0) {
      // Its allocation may have been lapped, never recorded after it: same thread, same lane.
      EXPECT_LT(e.time_ns, r.value.losses.history_from_ns + 1) << e.address;
    }
  }
}

} // namespace
} // namespace gmem::trace
