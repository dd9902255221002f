// Hand-built decoded traces for the tools' unit tests: deterministic times, addresses and
// stacks, so analyses and printers can be checked exactly.
#pragma once

#include <cstdint>
#include <string>

#include "profiler/format/trace_model.h"

namespace gmem::tools::testing {

inline constexpr std::uint64_t k_ms = 1'000'000;
inline constexpr std::uint64_t k_start = 1'790'000'000'000'000'000; // some wall clock, ns
inline constexpr std::uintptr_t k_seg0 = 0x7f0000000000;            // 2 MiB segment
inline constexpr std::uintptr_t k_seg1 = 0x7f0000200000;            // 20 MiB segment
inline constexpr std::uintptr_t k_seg2 = 0x7f0001600000;            // 2 MiB segment, empty

// A process that exited after 5 s, with one device pool holding three segments and live
// allocations from three stacks; stacks point into a module at a fixed (fake) address, so
// frames print as module+offset.
gmem::trace::trace sample_trace();

// Adds an event with the next seq.
void add_event(gmem::trace::trace& t, gmem::trace::event_type type, std::uint64_t time_ns,
               std::uintptr_t address, std::uint64_t size, std::uint64_t size2 = 0,
               std::uint32_t stack = 0, const std::string& label = {});

// Reads a golden file (tests/tools/golden/NAME); with GMEM_UPDATE_GOLDEN=1 writes `actual`
// there first. Returns the file's content.
std::string golden(const std::string& name, const std::string& actual);

} // namespace gmem::tools::testing
