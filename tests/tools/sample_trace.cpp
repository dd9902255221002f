#include "tests/tools/sample_trace.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gmem::tools::testing {

using gmem::trace::alloc_kind;
using gmem::trace::device_counters;
using gmem::trace::event;
using gmem::trace::event_type;
using gmem::trace::module;
using gmem::trace::trace_state;
using trace_t = gmem::trace::trace;

void add_event(trace_t& t, event_type type, std::uint64_t time_ns, std::uintptr_t address,
               std::uint64_t size, std::uint64_t size2, std::uint32_t stack,
               const std::string& label) {
  event e;
  e.seq = t.events.empty() ? 1 : t.events.back().seq + 1;
  e.type = type;
  e.time_ns = time_ns;
  e.thread = 4242;
  e.device = 0;
  e.address = address;
  e.size = size;
  e.size2 = size2;
  e.stream = 0;
  e.kind = alloc_kind::device;
  e.stack_id = stack;
  e.label = label;
  t.events.push_back(e);
  t.losses.last_seq = e.seq;
}

trace_t sample_trace() {
  trace_t t;
  t.info.format_version = gmem::trace::k_format_version;
  t.info.pid = 4242;
  t.info.start_realtime_ns = k_start;
  t.info.heartbeat_realtime_ns = k_start + 5000 * k_ms;
  t.info.exit_realtime_ns = k_start + 5000 * k_ms;
  t.info.argv = {"./leaky", "--steps", "3"};
  t.info.command_line = "./leaky --steps 3";
  t.info.source = "leaky.gmem";
  t.info.saved_file = true;
  t.info.state = trace_state::exited;
  t.info.stack_depth = 16;

  // A module at a fake address: nothing to open, so frames are module+offset.
  module m;
  m.path = "/opt/app/libmodel.so";
  m.load_bias = 0x555500000000;
  m.start = 0x555500000000;
  m.size = 0x100000;
  t.modules.push_back(m);
  t.stacks[1] = {0x555500001010, 0x555500002020};
  t.stacks[2] = {0x555500003030, 0x555500002020};
  t.stacks[3] = {0x555500004040};

  t.segments = {{k_seg0, 2 << 20, 0, 10 * k_ms},
                {k_seg1, 20 << 20, 0, 20 * k_ms},
                {k_seg2, 2 << 20, 0, 30 * k_ms}};
  // Segment 0: 4 x 256 KiB from stack 1 at its start, then free.
  for (int i = 0; i < 4; ++i)
    t.live.push_back({k_seg0 + static_cast<std::uintptr_t>(i) * (256 << 10), 250 << 10, 256 << 10,
                      0, ~std::uintptr_t{0}, alloc_kind::device, 4242,
                      (100 + static_cast<std::uint64_t>(i)) * k_ms, 1});
  // Segment 1: 8 MiB from stack 2 at offset 0, 4 MiB free, 1 MiB from stack 3, rest free.
  t.live.push_back({k_seg1, 8 << 20, 8 << 20, 0, 0, alloc_kind::async, 4242, 1000 * k_ms, 2});
  t.live.push_back({k_seg1 + (12 << 20), (1 << 20) - 512, 1 << 20, 0, 0, alloc_kind::device, 4242,
                    3000 * k_ms, 3});

  device_counters c;
  c.device = 0;
  c.time_ns = 5000 * k_ms;
  auto& s = c.stats;
  s.live_bytes = (1 << 20) + (8 << 20) + (1 << 20);
  s.live_requested_bytes = (1000 << 10) + (8 << 20) + (1 << 20) - 512;
  s.live_blocks = 6;
  s.reserved_bytes = 24 << 20;
  s.peak_live_bytes = 12 << 20;
  s.peak_reserved_bytes = 24 << 20;
  s.total_allocs = 40;
  s.total_frees = 34;
  s.cache_hits = 37;
  s.upstream_allocs = 3;
  s.segments = 3;
  s.segment_maps = 3;
  s.fences = 2;
  s.free_bytes = 14 << 20;
  s.largest_free_block = 7 << 20;
  t.devices.push_back(c);

  add_event(t, event_type::segment_map, 10 * k_ms, k_seg0, 2 << 20);
  add_event(t, event_type::segment_map, 20 * k_ms, k_seg1, 20 << 20);
  add_event(t, event_type::segment_map, 30 * k_ms, k_seg2, 2 << 20);
  for (int i = 0; i < 4; ++i)
    add_event(t, event_type::alloc, (100 + static_cast<std::uint64_t>(i)) * k_ms,
              k_seg0 + static_cast<std::uintptr_t>(i) * (256 << 10), 250 << 10, 256 << 10, 1);
  add_event(t, event_type::marker, 500 * k_ms, 0, 0, 0, 0, "epoch 1");
  add_event(t, event_type::alloc, 1000 * k_ms, k_seg1, 8 << 20, 8 << 20, 2);
  t.events.back().kind = alloc_kind::async;
  add_event(t, event_type::alloc, 1500 * k_ms, k_seg1 + (8 << 20), 2 << 20, 2 << 20, 2);
  add_event(t, event_type::free, 2000 * k_ms, k_seg1 + (8 << 20), 2 << 20, 2 << 20);
  add_event(t, event_type::fence, 2100 * k_ms, 0, 2 << 20, 50'000);
  add_event(t, event_type::oom, 2500 * k_ms, 0, 64 << 20, 0, 3);
  add_event(t, event_type::alloc, 3000 * k_ms, k_seg1 + (12 << 20), (1 << 20) - 512, 1 << 20, 3);
  t.losses.last_seq = t.events.back().seq;
  return t;
}

std::string golden(const std::string& name, const std::string& actual) {
  const std::string path = std::string(GMEM_TOOLS_GOLDEN_DIR) + "/" + name;
  if (const char* u = std::getenv("GMEM_UPDATE_GOLDEN"); u != nullptr && u[0] == '1') {
    std::ofstream(path, std::ios::binary) << actual;
  }
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

} // namespace gmem::tools::testing
