// Live and reserved bytes over time, per pool, rebuilt from the event ring, plus the moments
// worth marking (markers, OOMs, fences, trims). Feeds the HTML report and the Chrome export.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/format/trace_model.h"

namespace gmem::tools {

struct timeline_point {
  std::uint64_t t_ns = 0;
  std::uint64_t live = 0;     // pooled live bytes (as rounded by the pool)
  std::uint64_t reserved = 0; // bytes in segments
  std::uint64_t graph = 0;    // live graph memory (not pooled: memory nodes, captured allocations)
};

struct device_timeline {
  int device = 0;
  std::vector<timeline_point> points; // by time; one per event that changed a value
  std::uint64_t peak_live = 0;
  std::uint64_t peak_reserved = 0;
  std::uint64_t peak_graph = 0;
};

enum class mark_kind { marker, oom, fence, trim };

struct timeline_mark {
  std::uint64_t t_ns = 0;
  int device = 0;
  mark_kind kind = mark_kind::marker;
  std::string label;             // marker text
  std::uint64_t bytes = 0;       // oom: requested; fence/trim: released
  std::uint64_t duration_ns = 0; // fence
};

// Invariant: every device_timeline ends at the trace's present state (live table and segment
// list), so a ring that lost its oldest events shifts the curve instead of bending it.
struct timeline {
  std::vector<device_timeline> devices;
  std::vector<timeline_mark> marks;
  std::uint64_t begin_ns = 0;
  std::uint64_t end_ns = 0;
  bool lost_events = false;
};

bool is_pooled_kind(gmem::trace::alloc_kind kind);
bool is_graph_kind(gmem::trace::alloc_kind kind); // alloc_kind::capture: graph memory
timeline build_timeline(const gmem::trace::trace& trace);
const char* to_string(mark_kind k);

} // namespace gmem::tools
