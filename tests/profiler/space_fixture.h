// A trace header and the space after it in a plain buffer, for tests of one section's code
// (live table, intern table, ring) without a whole writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "profiler/format/trace_layout.h"
#include "profiler/format/trace_space.h"

namespace gmem::trace::testing {

struct space_fixture {
  std::vector<std::uint64_t> words;
  layout::header* h;
  trace_space space;
  // `bytes`: the most the trace may grow to.
  explicit space_fixture(std::uint64_t bytes = std::uint64_t{4} << 20)
      : words(bytes / 8, 0), h(reinterpret_cast<layout::header*>(words.data())),
        space(reinterpret_cast<std::byte*>(words.data()), bytes, layout::k_header_bytes,
              &h->total_bytes, &h->growth_refused, &h->flags, nullptr) {}
  const std::byte* base() const { return reinterpret_cast<const std::byte*>(words.data()); }
  std::uint64_t size() const { return layout::load_acquire(&h->total_bytes); }
};

} // namespace gmem::trace::testing
