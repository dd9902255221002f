// Text output of the read commands: pure functions from analysis results to strings, so the
// golden tests pin them without a terminal.
#pragma once

#include <cstdint>
#include <string>

#include "profiler/trace_model.h"

namespace gmem::tools {

struct leak_report;
struct leak_filter;
struct frag_report;
struct timeline;

struct print_options {
  std::size_t frames = 8;     // stack frames shown per call site
  std::size_t map_width = 64; // characters per segment map line
  bool full_paths = false;    // source and module paths in full
};

// One line naming the trace: "pid 1234 (./app --x), running, shm gmem.1234.5678".
std::string describe_source(const gmem::trace::trace& t);

std::string print_leaks(const gmem::trace::trace& t, const leak_report& r, const print_options& o);
std::string print_frag(const gmem::trace::trace& t, const frag_report& r, const print_options& o);
std::string print_stats(const gmem::trace::trace& t);

} // namespace gmem::tools
