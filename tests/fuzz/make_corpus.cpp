// Writes the seed corpus for trace_reader_fuzz: valid traces with every record kind, and
// damaged ones (truncated, other version, hostile counts and offsets, torn records).
// Usage: make_corpus DIR. Its output is committed in tests/fuzz/corpus/trace_reader.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "profiler/format/trace_layout.h"
#include "profiler/recorder/trace_writer.h"

using namespace gmem::trace;

namespace {

writer_config tiny() {
  writer_config c;
  c.live_slots = c.segment_slots = c.events = c.stack_slots = c.string_slots = 64;
  c.live_shards = 1;
  c.samples = 16;
  c.stack_ips = 1024;
  c.string_bytes = 4096;
  c.module_slots = 16;
  c.device_slots = 2;
  c.stack_depth = 4;
  c.event_lanes = 4;
  return c;
}

struct image {
  std::vector<std::uint64_t> words;
  trace_writer* w = nullptr;
  explicit image(const writer_config& c = tiny()) : words(c.map_bytes() / 8) {
    process_identity who;
    who.pid = 1234;
    who.proc_start_ticks = 99;
    who.argv = {"fuzz", "seed"};
    who.options = "GMEM_LIMIT=1G\n";
    w = new trace_writer(words.data(), c.map_bytes(), c, who);
  }
  ~image() { delete w; }
  layout::header& h() { return *reinterpret_cast<layout::header*>(words.data()); }
  std::uint64_t* at(std::uint64_t byte) { return words.data() + byte / 8; }
  std::uint64_t* first_extent(layout::section_id id) { return at(h().extents[id][0].offset); }
  // Lane `lane`'s descriptor, and its first chunk of event records.
  std::uint64_t* lane(std::uint32_t lane) {
    return first_extent(layout::k_events) + lane * layout::lane_word::count;
  }
  std::uint64_t* lane_records(std::uint32_t n) { return at(lane(n)[layout::lane_word::dir]); }
};

void fill(trace_writer& w, int allocs) {
  const std::uintptr_t ips[] = {0x401000, 0x402000, 0x403000};
  const std::uint32_t stack = w.intern_stack(ips, 3);
  w.segment(true, 0x700000000000, 1 << 21, 0);
  for (int i = 0; i < allocs; ++i)
    w.alloc(0x700000000000 + 512u * static_cast<unsigned>(i), 100, 512, 0, 3, alloc_kind::async,
            stack);
  w.free(0x700000000000, 0, 3, alloc_kind::async);
  w.fence(0, 1000, 512);
  w.trim(0, 0);
  gmem::pool_stats s;
  s.free_bytes = 10;
  w.oom(0, 1 << 30, s);
  w.marker("step 1");
  w.option("GMEM_LIMIT", "2G");
  device_stats d{0, s};
  w.sample(&d, 1, sample_reason::periodic);
  std::vector<module_info> mods(1);
  mods[0] = {"/bin/prog", 0x400000, 0x400000, 0x10000, "\x12\x34"};
  w.update_modules(mods);
}

void save(const std::string& dir, const std::string& name, const void* data, std::size_t n) {
  std::ofstream f(dir + "/" + name, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

void save(const std::string& dir, const std::string& name, image& im, std::size_t n = 0) {
  save(dir, name, im.words.data(), n ? n : im.h().total_bytes);
}

} // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_corpus DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  {
    image im;
    save(dir, "valid_empty", im);
  }
  {
    image im;
    fill(*im.w, 5);
    save(dir, "valid_every_kind", im);
  }
  {
    image im;
    fill(*im.w, 80);
    save(dir, "valid_wrapped_and_overflowed", im);
  }
  {
    // Grown: shards rehashed, ring chunks, string and stack levels and arena chunks added.
    writer_config c = tiny();
    c.live_slots = 512;
    c.live_shards = 2;
    c.events = 128;
    c.stack_slots = c.string_slots = 256;
    c.stack_ips = c.string_bytes = 2048;
    image im(c);
    fill(*im.w, 150);
    for (std::uintptr_t i = 0; i < 40; ++i) {
      const std::uintptr_t ips[] = {0x401000 + i, 0x402000};
      im.w->intern_stack(ips, 2);
      im.w->marker("marker " + std::to_string(i));
    }
    save(dir, "valid_grown", im);
  }
  {
    image im;
    fill(*im.w, 5);
    im.w->mark_shutdown();
    save(dir, "valid_exited", im);
  }
  {
    // Format 3: stacks with Python frames (one naming no string), and a no-GIL note.
    namespace pw = gmem::trace::layout::python_word;
    image im;
    fill(*im.w, 5);
    const std::uint32_t where = im.w->intern_string(std::string("/app/train.py") + '\0' + "step");
    const std::uintptr_t mixed[] = {0x401000, pw::frame(where, 88), pw::frame(77777, 3)};
    const std::uintptr_t no_gil[] = {0x401000, pw::note(pw::k_note_no_gil)};
    const std::uint32_t s1 = im.w->intern_stack(mixed, 3);
    im.w->intern_stack(no_gil, 2);
    im.w->alloc(0x9000, 64, 512, 0, 0, gmem::trace::alloc_kind::device, s1);
    save(dir, "valid_python", im);
  }
  {
    image im;
    fill(*im.w, 5);
    save(dir, "truncated_body", im, 9000);
  }
  {
    image im;
    save(dir, "truncated_header", im, 100);
  }
  {
    image im;
    im.h().format_version = 6;
    save(dir, "other_version", im);
  }
  {
    image im;
    std::memset(im.h().magic, 0, 8);
    save(dir, "unwritten_header", im);
  }
  {
    image im;
    im.h().sections[layout::k_events].capacity = 1ull << 60;
    save(dir, "hostile_capacity", im);
  }
  {
    image im;
    im.h().extents[layout::k_counters][0].offset = 1ull << 62;
    save(dir, "hostile_offset", im);
  }
  {
    image im;
    im.h().sections[layout::k_live].extent_count = 1000;
    save(dir, "hostile_extent_count", im);
  }
  {
    image im;
    fill(*im.w, 5);
    // Every live shard and lane chunk names the same extent, and a huge one.
    for (auto id : {layout::k_live, layout::k_segments})
      for (unsigned k = 0; k < layout::k_max_extents; ++k)
        im.h().extents[id][k].offset = im.h().extents[layout::k_live][0].offset;
    for (std::uint32_t n = 0; n < 2; ++n)
      im.lane(n)[layout::lane_word::dir] = im.h().extents[layout::k_live][0].offset;
    im.h().extents[layout::k_segments][0].capacity = 1ull << 40;
    save(dir, "hostile_extents", im);
  }
  {
    image im;
    fill(*im.w, 5);
    // A lane of 2^40 records (24 chunks of which only the first is inside the trace) whose
    // head is at the end of time: the reader must visit the chunks that are there, not 2^40
    // seqs.
    namespace lw = layout::lane_word;
    std::uint64_t* d = im.lane(1);
    const std::uint64_t c0 = std::uint64_t{1} << 17;
    d[lw::capacity] = std::uint64_t{1} << 40;
    d[lw::head] = ~0ull >> 1;
    for (std::uint32_t k = 0; k < layout::k_max_extents; ++k) {
      d[lw::dir + 2 * k] = k == 0 ? d[lw::dir] : (std::uint64_t{1} << 40) + 64 * k;
      d[lw::dir + 2 * k + 1] = layout::ring_chunk_records(k, c0);
    }
    save(dir, "hostile_lane", im);
  }
  {
    // Events from three threads (three lanes), merged by time by the reader.
    image im;
    fill(*im.w, 3);
    for (int t = 0; t < 2; ++t)
      std::thread([&im, t] {
        for (int i = 0; i < 4; ++i)
          im.w->marker("thread " + std::to_string(t) + " " + std::to_string(i));
      }).join();
    im.w->marker("main again");
    save(dir, "valid_threads", im);
  }
  {
    image im;
    im.h().stat_count = 1000;
    save(dir, "hostile_stat_count", im);
  }
  {
    image im;
    fill(*im.w, 5);
    im.lane(1)[layout::lane_word::head] = ~0ull;
    im.h().sample_head = ~0ull;
    im.h().module_count = ~0ull;
    save(dir, "hostile_heads", im);
  }
  {
    image im;
    fill(*im.w, 5);
    im.lane(2)[layout::lane_word::head] = 12; // a lane never used, with a head: refused
    save(dir, "unused_lane_with_head", im);
  }
  {
    image im;
    fill(*im.w, 5);
    // A stack slot and a string slot pointing far outside their arenas.
    auto* stacks = im.first_extent(layout::k_stack_slots);
    stacks[1] = layout::slot_word::pack(0xfffffff0, 0xffffff, layout::slot_word::k_ready);
    auto* strings = im.first_extent(layout::k_string_slots);
    for (int i = 0; i < 64; ++i)
      if (strings[2 * i] != 0)
        strings[2 * i + 1] = layout::slot_word::pack(4000, 0xffff, layout::slot_word::k_ready);
    save(dir, "hostile_refs", im);
  }
  {
    image im;
    fill(*im.w, 5);
    // A calibration that maps ticks beyond 2^64 ns (found by the fuzzer).
    im.h().tick0 = 0;
    im.h().tick1 = 1;
    im.h().mono0 = 0;
    im.h().mono1 = ~0ull;
    save(dir, "hostile_clock", im);
  }
  {
    image im;
    fill(*im.w, 5);
    // Every used string slot names the whole arena: the reader must not copy it 64 times.
    auto* strings = im.first_extent(layout::k_string_slots);
    const layout::extent arena = im.h().extents[layout::k_string_bytes][0];
    for (int i = 0; i < 64; ++i)
      if (strings[2 * i] != 0)
        strings[2 * i + 1] =
            layout::slot_word::pack(arena.offset, arena.capacity, layout::slot_word::k_ready);
    save(dir, "overlapping_string_ranges", im);
  }
  {
    image im;
    fill(*im.w, 5);
    auto* live = im.first_extent(layout::k_live);
    for (std::uint64_t i = 0; i < im.h().extents[layout::k_live][0].capacity; ++i)
      live[8 * i + 1] |= 1; // every slot mid-update: torn
    auto* ring = im.lane_records(1);
    ring[8 * 2] -= 1; // event 3 being written when the writer died
    save(dir, "torn_records", im);
  }
  {
    image im;
    fill(*im.w, 5);
    auto* ring = im.lane_records(1);
    ring[8 * 1 + 7] |= std::uint64_t{0xee} << 32; // unknown event type
    save(dir, "bad_event_type", im);
  }
  {
    // Case R4 of docs/security.md: one marker on device 2^29 (the PyTorch export grew to 24 GB
    // sizing a list per device id), and every event on that device.
    image im;
    fill(*im.w, 5);
    im.w->marker("forged device");
    auto* ring = im.lane_records(1);
    const std::uint64_t records = im.lane(1)[layout::lane_word::capacity];
    const std::uint64_t forged = std::uint64_t{1} << 29;
    for (std::uint64_t i = 0; i < records && i < 64; ++i) {
      std::uint64_t& word = ring[8 * i + layout::event_word::device_type];
      if (((word >> 32) & 0xff) == static_cast<std::uint64_t>(event_type::marker))
        word = (word & ~std::uint64_t{0xffffffff}) | forged;
    }
    save(dir, "hostile_marker_device", im);
    for (std::uint64_t i = 0; i < records && i < 64; ++i) {
      std::uint64_t& word = ring[8 * i + layout::event_word::device_type];
      word = (word & ~std::uint64_t{0xffffffff}) | forged;
    }
    save(dir, "hostile_event_devices", im);
  }
  {
    // Counters and samples of two devices (0 and the host pool), then forged: a device no
    // writer records, a device repeated, a sample on a made-up device.
    image im;
    fill(*im.w, 5);
    gmem::pool_stats s;
    s.live_bytes = 4096;
    const device_stats d[2] = {{0, s}, {-1, s}};
    im.w->sample(d, 2, sample_reason::periodic);
    im.w->sample(d, 2, sample_reason::periodic);
    save(dir, "valid_two_devices", im);
    const std::uint32_t record = im.h().sections[layout::k_counters].record_bytes / 8;
    std::uint64_t* counters = im.first_extent(layout::k_counters);
    std::uint64_t& second = counters[record + layout::stat_word::device_reason];
    const std::uint64_t kept = second;
    second = (second & ~std::uint64_t{0xffffffff}) | 5000u;
    save(dir, "hostile_counter_device", im);
    second = kept & ~std::uint64_t{0xffffffff}; // device 0 again
    save(dir, "hostile_counter_repeated", im);
    second = kept;
    std::uint64_t& sample = im.first_extent(layout::k_samples)[layout::stat_word::device_reason];
    sample = (sample & ~std::uint64_t{0xffffffff}) | 0xfffffffeu; // device -2
    save(dir, "hostile_sample_device", im);
  }
  {
    std::vector<unsigned char> garbage(12000);
    for (std::size_t i = 0; i < garbage.size(); ++i)
      garbage[i] = static_cast<unsigned char>(i * 131 + 7);
    std::memcpy(garbage.data(), layout::k_magic, 8);
    save(dir, "garbage_with_magic", garbage.data(), garbage.size());
  }
  return 0;
}
