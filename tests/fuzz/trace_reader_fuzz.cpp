// libFuzzer target for the trace reader: any bytes must decode to a trace or to an error with
// an offset, never crash, hang or trip a sanitizer, whole and in a bounded read (at most a bound
// of bytes copied, the newest samples only: case R27 of docs/security.md). `make fuzz` runs it with
// clang; the committed corpus (tests/fuzz/corpus/trace_reader) is replayed by `make test` through
// replay_main.cpp, built with gcc.
#include <cstddef>
#include <cstdint>
#include <span>

#include "profiler/reader/trace_reader.h"
#include "tests/fuzz/bounded_read.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}

// What the model promises its users, on every successful decode.
void check_model(const gmem::trace::trace& t, std::size_t size) {
  check(t.info.total_bytes <= size);
  for (const auto& a : t.live)
    check(a.stack_id == 0 || t.stack(a.stack_id) != nullptr);
  for (std::size_t i = 1; i < t.live.size(); ++i)
    check(t.live[i - 1].address <= t.live[i].address);
  for (const auto& e : t.events) {
    check(e.seq >= 1 && e.seq <= t.losses.last_seq);
    check(e.stack_id == 0 || t.stack(e.stack_id) != nullptr);
    check(static_cast<unsigned>(e.kind) < gmem::trace::k_alloc_kind_count);
  }
  check(t.events.size() + t.losses.lost_events == t.losses.last_seq);
  for (std::size_t i = 1; i < t.events.size(); ++i)
    check(t.events[i - 1].seq < t.events[i].seq);
  for (const auto& [id, ips] : t.stacks)
    check(id != 0 && ips.size() < (1u << 24));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size);
  const gmem::trace::read_result r = gmem::trace::decode(bytes);
  if (r) {
    check_model(r.value, size);
  } else {
    check(!r.error.message.empty());
    check(r.error.offset <= size || r.error.offset < 4096);
  }
  // Bounded: the same bytes read as a listing or the exporter reads them (a bound that varies
  // with the input, so that every section is cut somewhere), and the newest samples only.
  const gmem::trace::read_options bounded{.max_copy_bytes = 8192 + size % 4096 * 16,
                                          .max_samples = size % 7 + 1};
  const gmem::trace::read_result b = gmem::fuzz::read_bounded(data, size, bounded);
  if (b) {
    check_model(b.value, size);
    check(b.value.samples.size() <= bounded.max_samples);
  }
  return 0;
}
