// Bounded reads (private_copy.h, copy_limits; read_options::max_copy_bytes): a reader copies at
// most its bound of a trace whatever the trace's sections claim, decodes only what it copied,
// and decodes a writer's trace that fits whole exactly as a full read does. Also the bound on
// decoded samples (no more than the sample ring's bytes would hold).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <string>
#include <unistd.h>

#include "profiler/format/trace_layout.h"
#include "profiler/reader/private_copy.h"
#include "profiler/reader/trace_open.h"
#include "profiler/reader/trace_reader.h"
#include "tests/profiler/test_buffer.h"

namespace gmem::trace {
namespace {

namespace l = layout;
using testing::trace_buffer;

constexpr std::uint64_t k_mib = std::uint64_t{1} << 20;

// A writer's small trace: two devices' counters and samples, a module, a few allocations.
std::vector<char> writer_image() {
  trace_buffer b;
  device_stats s[2] = {};
  s[0].device = 0;
  s[0].stats.live_bytes = 111;
  s[1].device = -1;
  s[1].stats.reserved_bytes = 222;
  b.writer->update_modules({{"/usr/bin/prog", 0x1000, 0x1000, 0x2000, "id"}});
  for (int i = 0; i < 8; ++i) {
    b.writer->alloc(static_cast<std::uintptr_t>(i + 1) << 12, 100, 512, 0, 0, alloc_kind::device,
                    0);
    b.writer->sample(s, 2, sample_reason::periodic);
  }
  const auto bytes = b.bytes();
  return {reinterpret_cast<const char*>(bytes.data()),
          reinterpret_cast<const char*>(bytes.data()) + bytes.size()};
}

template <class T> T get(const std::vector<char>& image, std::size_t at) {
  T v;
  std::memcpy(&v, image.data() + at, sizeof v);
  return v;
}
template <class T> void put(std::vector<char>& image, std::size_t at, T v) {
  std::memcpy(image.data() + at, &v, sizeof v);
}
std::size_t section_at(std::uint32_t i) {
  return offsetof(l::header, sections) + i * sizeof(l::section);
}
std::size_t extent_at(std::uint32_t i, std::uint32_t k) {
  return offsetof(l::header, extents) + (i * l::k_max_extents + k) * sizeof(l::extent);
}

// `image` grown to `total` bytes (a hole after its end but for the pages `fill` names, each
// filled with 'x'), total_bytes saying so.
struct temp_trace {
  std::string path;
  temp_trace(std::vector<char> image, std::uint64_t total,
             const std::vector<std::uint64_t>& fill = {}) {
    char name[] = "/tmp/gmem_private_copy_XXXXXX";
    const int fd = mkstemp(name);
    path = name;
    put<std::uint64_t>(image, offsetof(l::header, total_bytes), total);
    EXPECT_EQ(write(fd, image.data(), image.size()), static_cast<ssize_t>(image.size()));
    const std::vector<char> page(4096, 'x');
    for (const std::uint64_t at : fill)
      EXPECT_EQ(pwrite(fd, page.data(), page.size(), static_cast<off_t>(at)), 4096);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(total)), 0);
    close(fd);
  }
  ~temp_trace() { unlink(path.c_str()); }
};

// Points section `i` (a fixed one) at one extent [at, total) of its records.
void fixed_section_over(std::vector<char>& image, std::uint32_t i, std::uint64_t at,
                        std::uint64_t total) {
  const auto record = get<std::uint32_t>(image, section_at(i) + 8);
  const std::uint64_t records = (total - at) / record;
  put<std::uint64_t>(image, section_at(i), records);
  put<std::uint64_t>(image, extent_at(i, 0), at);
  put<std::uint64_t>(image, extent_at(i, 0) + 8, records);
}

TEST(private_copy, a_trace_that_fits_reads_as_a_whole_read) {
  const temp_trace t(writer_image(), writer_image().size());
  const read_result whole = open_file(t.path);
  const read_result bounded = open_file(t.path, {.max_copy_bytes = 64 * k_mib});
  ASSERT_TRUE(whole) << whole.error.to_string();
  ASSERT_TRUE(bounded) << bounded.error.to_string();
  EXPECT_EQ(bounded.value.info.cut_sections, 0u);
  EXPECT_EQ(bounded.value.info.command_line, whole.value.info.command_line);
  EXPECT_EQ(bounded.value.devices.size(), 2u);
  EXPECT_EQ(bounded.value.samples.size(), whole.value.samples.size());
  EXPECT_EQ(bounded.value.live.size(), whole.value.live.size());
  EXPECT_EQ(bounded.value.events.size(), whole.value.events.size());
  ASSERT_EQ(bounded.value.modules.size(), 1u);
  EXPECT_EQ(bounded.value.modules[0].path, "/usr/bin/prog");
  EXPECT_LE(bounded.value.info.copied_bytes, whole.value.info.copied_bytes);
}

// A header consistent with its object (total_bytes is its size) whose module map spans 256 MiB
// of written pages: a bounded read copies its bound, keeps the header, the counters and the
// strings, and cuts the module map to what fit.
TEST(private_copy, a_huge_section_is_cut_at_the_bound) {
  std::vector<char> image = writer_image();
  const std::uint64_t total = 256 * k_mib, at = 16 * k_mib;
  fixed_section_over(image, l::k_modules, at, total);
  put<std::uint64_t>(image, offsetof(l::header, module_count), 65536);
  std::vector<std::uint64_t> pages;
  for (std::uint64_t p = at; p < total; p += 8 * k_mib)
    pages.push_back(p);
  const temp_trace t(image, total, pages);
  for (const std::uint64_t bound : {std::uint64_t{64} << 10, 4 * k_mib}) {
    const read_result r = open_file(t.path, {.events = false, .max_copy_bytes = bound});
    ASSERT_TRUE(r) << r.error.to_string();
    EXPECT_LE(r.value.info.copied_bytes, bound + 8192) << bound; // the header, then the bound
    EXPECT_NE(r.value.info.cut_sections & (1u << l::k_modules), 0u);
    EXPECT_EQ(r.value.info.command_line, "prog --flag x");
    EXPECT_EQ(r.value.devices.size(), 2u);
  }
  // Unbounded, the whole object is still copied: the data pages, every one of them.
  const read_result whole = open_file(t.path, {.events = false});
  EXPECT_GE(whole.value.info.copied_bytes, pages.size() * 4096);
}

// The copy's own header names only what was copied: the decoder never walks the zeros of a
// section it was not given (a 1 GiB module map, or a string level of 2^26 slots, would cost it
// time). The counters, the cut module map and the strings' first level are there.
TEST(private_copy, the_copy_header_names_only_what_was_copied) {
  std::vector<char> image = writer_image();
  const std::uint64_t total = std::uint64_t{1} << 30, at = 16 * k_mib;
  fixed_section_over(image, l::k_modules, at, total / 2);
  // A second level of string slots over the other half.
  const auto levels = get<std::uint32_t>(image, section_at(l::k_string_slots) + 12);
  ASSERT_LT(levels, l::k_max_extents);
  put<std::uint64_t>(image, extent_at(l::k_string_slots, levels), total / 2);
  put<std::uint64_t>(image, extent_at(l::k_string_slots, levels) + 8, total / 2 / 16);
  put<std::uint32_t>(image, section_at(l::k_string_slots) + 12, levels + 1);
  const temp_trace t(image, total, {at, total / 2});
  constexpr std::uint64_t k_bound = 2 * k_mib;
  private_copy copy;
  std::string why;
  ASSERT_TRUE(copy.read(t.path, false, &why, {}, {.max_bytes = k_bound})) << why;
  EXPECT_LE(copy.copied_bytes(), k_bound);
  EXPECT_NE(copy.cut_sections() & (1u << l::k_modules), 0u);
  EXPECT_NE(copy.cut_sections() & (1u << l::k_string_slots), 0u);
  const std::vector<char> header(reinterpret_cast<const char*>(copy.bytes().data()),
                                 reinterpret_cast<const char*>(copy.bytes().data()) + 8192);
  for (std::uint32_t i = 0; i < l::k_section_count; ++i) {
    if (l::kind_of(i) != l::section_kind::fixed && l::kind_of(i) != l::section_kind::levels &&
        l::kind_of(i) != l::section_kind::arena)
      continue;
    const auto record = get<std::uint32_t>(header, section_at(i) + 8);
    const auto n = get<std::uint32_t>(header, section_at(i) + 12);
    std::uint64_t named = 0;
    for (std::uint32_t k = 0; k < n; ++k)
      named += get<std::uint64_t>(header, extent_at(i, k) + 8) * record;
    EXPECT_LE(named, k_bound) << "section " << i;
  }
  EXPECT_EQ(get<std::uint32_t>(header, section_at(l::k_string_slots) + 12), levels);
  const read_result r = decode(copy.bytes());
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_EQ(r.value.info.command_line, "prog --flag x");
}

// A sample ring (or the live tables, or the event lanes) that does not fit is left out whole:
// none of its records is decoded, and the copy says so.
TEST(private_copy, a_ring_that_does_not_fit_is_left_out) {
  std::vector<char> image = writer_image();
  const std::uint64_t total = 256 * k_mib, at = 16 * k_mib;
  const auto record = get<std::uint32_t>(image, section_at(l::k_samples) + 8);
  const std::uint64_t capacity = std::uint64_t{1} << 18; // 2^18 records: over 64 MiB
  ASSERT_LE(at + capacity * record, total);
  put<std::uint64_t>(image, section_at(l::k_samples), capacity);
  put<std::uint32_t>(image, section_at(l::k_samples) + 12, 1);
  put<std::uint64_t>(image, extent_at(l::k_samples, 0), at);
  put<std::uint64_t>(image, extent_at(l::k_samples, 0) + 8, capacity);
  put<std::uint64_t>(image, offsetof(l::header, sample_head), capacity);
  const temp_trace t(image, total, {at, at + 32 * k_mib, at + 60 * k_mib});
  const read_result r = open_file(t.path, {.max_copy_bytes = 8 * k_mib});
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_NE(r.value.info.cut_sections & (1u << l::k_samples), 0u);
  EXPECT_TRUE(r.value.samples.empty());
  EXPECT_LE(r.value.info.copied_bytes, 8 * k_mib + 8192);
  EXPECT_EQ(r.value.devices.size(), 2u);
}

// Samples decode to a fixed size whatever their records hold: a ring of short records (no value
// slots) decodes to no more samples than its bytes would hold as decoded samples, the newest;
// max_samples keeps only the newest N.
TEST(private_copy, decoded_samples_are_bounded_by_the_ring) {
  std::vector<char> image = writer_image();
  const auto stat_count = get<std::uint32_t>(image, offsetof(l::header, stat_count));
  const auto slots = get<std::uint32_t>(image, offsetof(l::header, stat_slots));
  const std::uint32_t record = (l::stat_word::values + slots) * 8;
  // The writer's records hold a decoded sample: the bound drops none of them.
  EXPECT_GE(record, sizeof(stat_sample)) << stat_count << " stats in " << slots << " slots";
  // Forged: no stats, records of four words, a ring of 2^16 of them all written.
  put<std::uint32_t>(image, offsetof(l::header, stat_count), 0);
  put<std::uint32_t>(image, offsetof(l::header, stat_slots), 0);
  const std::uint32_t short_record = l::stat_word::values * 8;
  // The counter records (re-cut to the short size) read as unused.
  const auto counters_at = get<std::uint64_t>(image, extent_at(l::k_counters, 0));
  std::memset(image.data() + counters_at, 0,
              get<std::uint64_t>(image, section_at(l::k_counters)) * record);
  put<std::uint32_t>(image, section_at(l::k_counters) + 8, short_record);
  put<std::uint32_t>(image, section_at(l::k_samples) + 8, short_record);
  const std::uint64_t capacity = std::uint64_t{1} << 16;
  const std::uint64_t at = (image.size() + 63) / 64 * 64;
  image.resize(at + capacity * short_record);
  put<std::uint64_t>(image, section_at(l::k_samples), capacity);
  put<std::uint32_t>(image, section_at(l::k_samples) + 12, 1);
  put<std::uint64_t>(image, extent_at(l::k_samples, 0), at);
  put<std::uint64_t>(image, extent_at(l::k_samples, 0) + 8, capacity);
  put<std::uint64_t>(image, offsetof(l::header, sample_head), capacity);
  for (std::uint64_t i = 0; i < capacity; ++i) {
    const std::size_t r = at + i * short_record;
    put<std::uint64_t>(image, r, 2 * (i + 1)); // complete, seq i + 1
    put<std::uint64_t>(image, r + 8 * l::stat_word::device_reason, 0);
  }
  put<std::uint64_t>(image, offsetof(l::header, total_bytes), image.size());
  const read_result r = decode({reinterpret_cast<const std::byte*>(image.data()), image.size()});
  ASSERT_TRUE(r) << r.error.to_string();
  EXPECT_GT(r.value.samples.size(), 0u);
  EXPECT_LE(r.value.samples.size() * sizeof(stat_sample), capacity * short_record);
  EXPECT_EQ(r.value.samples.back().seq, capacity); // the newest kept
  EXPECT_EQ(r.value.losses.lost_samples, 0u);      // left out by the bound, not lost
  const read_result few =
      decode({reinterpret_cast<const std::byte*>(image.data()), image.size()}, {.max_samples = 5});
  ASSERT_TRUE(few) << few.error.to_string();
  ASSERT_EQ(few.value.samples.size(), 5u);
  EXPECT_EQ(few.value.samples.front().seq, capacity - 4);
}

} // namespace
} // namespace gmem::trace
