// A zeroed, 64-byte aligned buffer holding one trace, for tests that need no shared memory.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "profiler/recorder/trace_writer.h"

namespace gmem::trace::testing {

// Small capacities so wrap-around and overflow are cheap to reach.
inline writer_config small_config() {
  writer_config c;
  c.live_slots = 256;
  c.live_shards = 8; // 32 slots each: 256 addresses fill them all
  c.segment_slots = 64;
  c.events = 64;
  c.samples = 16;
  c.stack_slots = 64;
  c.stack_ips = 1024;
  c.string_slots = 64;
  c.string_bytes = 4096;
  c.module_slots = 16;
  c.device_slots = 4;
  c.stack_depth = 8;
  return c;
}

inline process_identity test_identity() {
  process_identity who;
  who.pid = 4242;
  who.proc_start_ticks = 777;
  who.start_realtime_ns = 1'700'000'000'000'000'000ull;
  who.start_monotonic_ns = 0;
  who.argv = {"prog", "--flag", "x"};
  who.options = "GMEM_LIMIT=1G\nGMEM_STACK_DEPTH=8\n";
  return who;
}

struct trace_buffer {
  std::vector<std::uint64_t> words;
  std::unique_ptr<trace_writer> writer;

  // The whole mapping is usable memory: the trace grows into it without a backing.
  explicit trace_buffer(const writer_config& c = small_config(),
                        const process_identity& who = test_identity())
      : words(c.map_bytes() / 8 + 8, 0) {
    auto* base = reinterpret_cast<std::byte*>(words.data());
    const std::size_t pad = (64 - reinterpret_cast<std::uintptr_t>(base) % 64) % 64;
    writer = std::make_unique<trace_writer>(base + pad, c.map_bytes(), c, who);
  }
  // The bytes in use now (a reader while writers run should use all_bytes()).
  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(writer->data()), writer->total_bytes()};
  }
  std::span<const std::byte> all_bytes() const {
    return {static_cast<const std::byte*>(writer->data()), writer->config().map_bytes()};
  }
  std::byte* mutable_bytes() {
    return const_cast<std::byte*>(static_cast<const std::byte*>(writer->data()));
  }
};

} // namespace gmem::trace::testing
