// The tensor observer's pure parts (profiler/recorder/tensor_observer.h) and the live table's
// filing of a tensor apart from the segment that starts at the same address.
#include "profiler/recorder/tensor_observer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "profiler/format/live_table.h"
#include "tests/profiler/space_fixture.h"

namespace gmem::trace {
namespace {

// PyTorch 2.11's row (python/gmem_bootstrap/sitecustomize.py).
torch_layout row_2_11() {
  torch_layout l{};
  l.struct_bytes = sizeof l;
  l.version = k_torch_layout_version;
  l.attach_slot = 44;
  l.entry_bytes = 136;
  l.action_offset = 0;
  l.device_offset = 4;
  l.addr_offset = 8;
  l.stream_offset = 32;
  l.size_offset = 40;
  l.action_alloc = 0;
  l.action_free = 1;
  l.action_max = 8;
  l.flags = k_check_owner;
  return l;
}

std::vector<unsigned char> entry(std::int32_t action, std::int8_t device, std::uint64_t addr,
                                 std::uint64_t size, std::uint64_t stream) {
  std::vector<unsigned char> e(136, 0xEE);
  std::memcpy(e.data() + 0, &action, 4);
  std::memcpy(e.data() + 4, &device, 1);
  std::memcpy(e.data() + 8, &addr, 8);
  std::memcpy(e.data() + 32, &stream, 8);
  std::memcpy(e.data() + 40, &size, 8);
  return e;
}

TEST(TensorObserver, ValidatesTheLayoutDescriptor) {
  EXPECT_EQ(validate(row_2_11()), "");
  auto bad = [](auto change) {
    torch_layout l = row_2_11();
    change(l);
    return validate(l);
  };
  EXPECT_NE(bad([](torch_layout& l) { l.struct_bytes = 48; }), "");
  EXPECT_NE(bad([](torch_layout& l) { l.version = 2; }), "");
  EXPECT_NE(bad([](torch_layout& l) { l.attach_slot = 0; }), "");
  EXPECT_NE(bad([](torch_layout& l) { l.attach_slot = 100000; }), "");
  EXPECT_EQ(bad([](torch_layout& l) { l.size_offset = 132; }), "a field outside the TraceEntry");
  EXPECT_EQ(bad([](torch_layout& l) { l.addr_offset = 12; }), "a field outside the TraceEntry");
  EXPECT_EQ(bad([](torch_layout& l) { l.entry_bytes = 40; }), "a field outside the TraceEntry");
  EXPECT_EQ(bad([](torch_layout& l) { l.action_free = 0; }), "implausible action numbers");
  EXPECT_EQ(bad([](torch_layout& l) { l.action_max = 0; }), "implausible action numbers");
  EXPECT_EQ(bad([](torch_layout& l) { l.flags = 6; }), "unknown flags");
}

TEST(TensorObserver, DecodesTraceEntries) {
  const torch_layout l = row_2_11();
  const auto a = entry(0, 3, 0x7f0000200000, 1000000, 0x1a8cf400);
  const observed_event e = decode(l, a.data());
  EXPECT_EQ(e.type, observed_event::what::alloc);
  EXPECT_EQ(e.device, 3);
  EXPECT_EQ(e.address, 0x7f0000200000u);
  EXPECT_EQ(e.size, 1000000u);
  EXPECT_EQ(e.stream, 0x1a8cf400u);
  EXPECT_EQ(decode(l, entry(1, 0, 1, 0, 0).data()).type, observed_event::what::free);
  // FREE_COMPLETED and the segment events are not the program's.
  for (int other : {2, 3, 4, 5, 6, 7, 8})
    EXPECT_EQ(decode(l, entry(other, 0, 1, 1, 0).data()).type, observed_event::what::other);
}

TEST(TensorObserver, ChecksEachField) {
  auto check = [](std::int32_t action, int device, std::uint64_t addr, std::uint64_t size) {
    const torch_layout l = row_2_11();
    return check_event(
        decode(l, entry(action, static_cast<std::int8_t>(device), addr, size, 0).data()),
        l.action_max);
  };
  EXPECT_EQ(check(0, 0, 0x7f0000200000, 512), "");
  EXPECT_EQ(check(1, 0, 0x7f0000200000, 0), ""); // a free carries no size
  EXPECT_EQ(check(3, 0, 0, 0), "");              // a segment event: not a block
  EXPECT_EQ(check(9, 0, 0x1000, 1), "action 9 is out of range");
  EXPECT_EQ(check(-1, 0, 0x1000, 1), "action -1 is out of range");
  EXPECT_EQ(check(0, -1, 0x1000, 1), "device -1 is out of range");
  EXPECT_EQ(check(0, 64, 0x1000, 1), "device 64 is out of range");
  EXPECT_EQ(check(0, 0, 0, 1), "a block at address 0");
  EXPECT_EQ(check(1, 0, 0, 0), "a block at address 0");
  EXPECT_EQ(check(0, 0, 0xEEEEEEEEEEEEEEEE, 1), "a block at 0xeeeeeeeeeeeeeeee");
  EXPECT_EQ(check(0, 0, 0x1000, 0), "a block of 0 bytes");
  EXPECT_EQ(check(0, 0, 0x1000, std::uint64_t{1} << 50), "a block of 1125899906842624 bytes");
}

observed_event alloc_at(std::uintptr_t addr) {
  observed_event e;
  e.type = observed_event::what::alloc;
  e.address = addr;
  e.size = 512;
  return e;
}

TEST(TensorObserver, GateClosesForGoodOnTheFirstViolationAndSaysSoOnce) {
  sanity_gate gate;
  std::string why;
  EXPECT_TRUE(gate.admit(alloc_at(0x1000), 8, nullptr, &why));
  observed_event bad = alloc_at(0x2000);
  bad.action = 42;
  EXPECT_FALSE(gate.admit(bad, 8, nullptr, &why));
  EXPECT_EQ(why, "action 42 is out of range");
  why.clear();
  EXPECT_FALSE(gate.admit(alloc_at(0x3000), 8, nullptr, &why)); // good events: still off
  EXPECT_FALSE(gate.admit(bad, 8, nullptr, &why));
  EXPECT_EQ(why, ""); // said once
  EXPECT_FALSE(gate.open());
}

TEST(TensorObserver, GateStopsCheckingAfterTheFirstEvents) {
  sanity_gate gate;
  for (std::uint32_t i = 0; i < sanity_gate::k_checked_events; ++i)
    ASSERT_TRUE(gate.admit(alloc_at(0x1000 + i * 512), 8, nullptr, nullptr));
  observed_event late = alloc_at(0);
  EXPECT_TRUE(gate.admit(late, 8, nullptr, nullptr)); // past the checked events: one load
  EXPECT_TRUE(gate.open());
}

TEST(TensorObserver, GateWantsOneOfTheFirstBlocksInsideGmemsSegments) {
  static std::uintptr_t owned_from = 0;
  auto owner = [](std::uintptr_t a) noexcept { return owned_from != 0 && a >= owned_from; };
  {
    sanity_gate gate; // graph pools' blocks come from the driver: outside, but one inside is enough
    owned_from = 0x100000;
    std::string why;
    for (int i = 0; i < 20; ++i)
      EXPECT_TRUE(gate.admit(alloc_at(i == 3 ? 0x200000 : 0x1000), 8, owner, &why));
    EXPECT_EQ(why, "");
  }
  {
    sanity_gate gate; // a misread address field: never inside
    owned_from = 0;
    std::string why;
    for (std::uint32_t i = 0; i + 1 < sanity_gate::k_owner_probes; ++i)
      EXPECT_TRUE(gate.admit(alloc_at(0x1000), 8, owner, &why));
    EXPECT_FALSE(gate.admit(alloc_at(0x1000), 8, owner, &why));
    EXPECT_EQ(why, "its first 8 blocks outside every segment gmem handed out (the last at 0x1000)");
  }
}

TEST(TensorObserver, GateClosesOnceUnderThreads) {
  sanity_gate gate;
  std::atomic<int> said{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) {
        observed_event e = alloc_at(0x1000);
        if (i == 10) e.size = 0;
        std::string why;
        gate.admit(e, 8, nullptr, &why);
        if (!why.empty()) ++said;
      }
    });
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(said.load(), 1);
  EXPECT_FALSE(gate.open());
}

struct keyed_table : testing::space_fixture {
  std::uint64_t overflow = 0, unmatched = 0;
  live_table table;
  keyed_table() : space_fixture(std::uint64_t{8} << 20) {
    EXPECT_TRUE(table.open(&space, h, layout::k_live, 4, 16, 1024, &overflow, &unmatched));
  }
  std::vector<live_entry> read() const {
    std::vector<live_entry> out;
    std::uint64_t corrupt = 0;
    read_live_table(
        base(), words.size() * 8, h->sections[layout::k_live], h->extents[layout::k_live],
        &h->sections[layout::k_live].dir_version, [&](const live_entry& e) { out.push_back(e); },
        &corrupt);
    return out;
  }
};

TEST(TensorObserver, ATensorIsFiledApartFromItsSegmentAtTheSameAddress) {
  keyed_table t;
  live_entry segment;
  segment.address = 0x7f0000000000;
  segment.requested = segment.rounded = 20u << 20;
  segment.kind = alloc_kind::device;
  live_entry tensor = segment;
  tensor.requested = tensor.rounded = 4u << 20;
  tensor.kind = alloc_kind::tensor;
  ASSERT_TRUE(t.table.insert(segment, live_key(segment.address, segment.kind)));
  ASSERT_TRUE(t.table.insert(tensor, live_key(tensor.address, tensor.kind)));
  EXPECT_TRUE(t.table.is_valid());
  auto live = t.read();
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(live[0].address, live[1].address); // readers see the address, never the key
  // The tensor's free removes the tensor, not the segment.
  live_entry gone;
  ASSERT_TRUE(t.table.erase(live_key(tensor.address, alloc_kind::tensor), &gone));
  EXPECT_EQ(gone.address, tensor.address);
  EXPECT_EQ(gone.requested, 4u << 20);
  live = t.read();
  ASSERT_EQ(live.size(), 1u);
  EXPECT_EQ(live[0].kind, alloc_kind::device);
  EXPECT_EQ(live[0].requested, 20u << 20);
  EXPECT_TRUE(t.table.is_valid());
  EXPECT_EQ(live_key(0x1000, alloc_kind::device), 0x1000u);
  EXPECT_NE(live_key(0x1000, alloc_kind::tensor), 0x1000u);
}

} // namespace
} // namespace gmem::trace
