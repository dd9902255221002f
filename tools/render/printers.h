// Text output of the read commands: pure functions from analysis results to strings, so the
// golden tests pin them without a terminal.
#pragma once

#include <cstdint>
#include <string>

#include "profiler/format/trace_model.h"

namespace gmem::tools {

struct frame_info;
struct leak_report;
struct leak_site;
struct leak_filter;
struct frag_report;
struct timeline;

struct print_options {
  std::size_t frames = 8;     // stack frames shown per call site
  std::size_t map_width = 64; // characters per segment map line
  bool full_paths = false;    // source and module paths in full
};

// "1 allocation", "3 allocations".
std::string plural(std::uint64_t n, const char* one, const char* many);
// A site's verdict in words: "leak: grows as the program repeats, +1.00 MiB/min over the last
// 5 min", "held: ...", "leak: never freed before the program exited".
std::string verdict_text(const leak_site& s, const leak_report& r);
// A frame as the read commands print it, without a newline: "    #2  f() at file.cpp:12"
// (escaped; full source path with o.full_paths).
std::string frame_head(const frame_info& f, std::size_t index, const print_options& o);

// One line naming the trace: "pid 1234 (./app --x), running, shm gmem.1234.5678".
std::string describe_source(const gmem::trace::trace& t);

std::string print_leaks(const gmem::trace::trace& t, const leak_report& r, const print_options& o);
std::string print_frag(const gmem::trace::trace& t, const frag_report& r, const print_options& o);
std::string print_stats(const gmem::trace::trace& t);

} // namespace gmem::tools
