#include "tools/export/pytorch_export.h"

#include <algorithm>
#include <map>

#include "tools/analysis/leak_report.h"
#include "tools/analysis/timeline.h"
#include "tools/stack_view.h"

namespace gmem::tools {
namespace {

// Stream-less (cuMemAlloc) shows as the default stream, as in PyTorch.
std::uint64_t stream_of(std::uintptr_t s) {
  return s == ~std::uintptr_t{0} ? 0 : s;
}

// The event types the snapshot's device traces carry.
bool exported(gmem::trace::event_type type) {
  using gmem::trace::event_type;
  return type == event_type::alloc || type == event_type::free || type == event_type::segment_map ||
         type == event_type::segment_unmap || type == event_type::oom;
}

class frame_cache {
public:
  frame_cache(const gmem::trace::trace& t, symbolizer& s, frame_view view)
      : t_(t), symbols_(s), view_(view) {}
  py_value get(std::uint32_t stack_id) {
    auto it = cache_.find(stack_id);
    if (it != cache_.end()) return it->second;
    py_list frames;
    // Like PyTorch's own snapshots: Python frames (filename = the .py file) first, innermost
    // first, then the native frames.
    for (const auto& f : show_stack(t_, stack_id, symbols_, view_).frames)
      frames.push_back(py_dict{
          {"filename", f.file.empty() ? f.module : f.file}, {"line", f.line}, {"name", f.name()}});
    return cache_.emplace(stack_id, py_value(std::move(frames))).first->second;
  }

private:
  const gmem::trace::trace& t_;
  symbolizer& symbols_;
  frame_view view_;
  std::map<std::uint32_t, py_value> cache_;
};

// With a framework's allocator observed (trace_info::observed_frameworks), its tensors are the
// snapshot's blocks and the segments it asked the driver for are not: their space shows as
// inactive (cached) within gmem's segments, as PyTorch's own snapshots show it.
class observed_caches {
public:
  observed_caches(const gmem::trace::trace& t, symbolizer& s) : t_(t), symbols_(s) {}
  bool is_cache(std::uint32_t stack_id, gmem::trace::alloc_kind kind) {
    if (t_.info.observed_frameworks == 0 || kind == gmem::trace::alloc_kind::tensor) return false;
    auto it = memo_.find(stack_id);
    if (it == memo_.end()) {
      const framework_cache* c =
          framework_cache_of(all_frames(t_, stack_id, symbols_), t_.info.options);
      const bool observed = c != nullptr && c->observed_as >= 0 &&
                            (t_.info.observed_frameworks >> c->observed_as & 1u);
      it = memo_.emplace(stack_id, observed).first;
    }
    return it->second;
  }

private:
  const gmem::trace::trace& t_;
  symbolizer& symbols_;
  std::map<std::uint32_t, bool> memo_;
};

} // namespace

py_value pytorch_snapshot(const gmem::trace::trace& t, symbolizer& symbols, bool all_frames) {
  frame_cache frames(t, symbols, all_frames ? frame_view::all : frame_view::mixed);
  observed_caches caches(t, symbols);
  py_list segments;
  // device_traces is a list indexed by device, as PyTorch's snapshots are: its length comes
  // from the device ids the exported records carry, which a trace's writer chooses. Ids past
  // k_max_device are no device any host has; their records are left out, so one forged id
  // (2^29 in a marker) cannot make the export allocate a list per id below it.
  constexpr int k_max_device = 1023;
  int max_device = -1;
  for (const auto& s : t.segments)
    if (s.device <= k_max_device) max_device = std::max(max_device, s.device);
  for (const auto& e : t.events)
    if (exported(e.type) && e.device <= k_max_device) max_device = std::max(max_device, e.device);
  for (const auto& seg : t.segments) {
    if (seg.device < 0 || seg.device > max_device) continue;
    py_list blocks;
    std::uint64_t at = 0, allocated = 0, requested = 0;
    auto gap = [&](std::uint64_t upto) {
      if (upto > at)
        blocks.push_back(py_dict{{"address", seg.base + at},
                                 {"size", upto - at},
                                 {"requested_size", 0},
                                 {"state", "inactive"},
                                 {"frames", py_list{}}});
      at = std::max(at, upto);
    };
    auto it = std::lower_bound(t.live.begin(), t.live.end(), seg.base,
                               [](const auto& a, std::uintptr_t v) { return a.address < v; });
    for (; it != t.live.end() && it->address - seg.base < seg.bytes; ++it) {
      const std::uint64_t off = it->address - seg.base;
      if (it->device != seg.device || off < at || caches.is_cache(it->stack_id, it->kind)) continue;
      const std::uint64_t size = std::min(std::max(it->rounded, it->requested), seg.bytes - off);
      gap(off);
      blocks.push_back(py_dict{{"address", it->address},
                               {"size", size},
                               {"requested_size", std::min(it->requested, size)},
                               {"state", "active_allocated"},
                               {"frames", frames.get(it->stack_id)}});
      allocated += size;
      requested += std::min(it->requested, size);
      at = off + size;
    }
    gap(seg.bytes);
    segments.push_back(py_dict{{"device", seg.device},
                               {"address", seg.base},
                               {"total_size", seg.bytes},
                               {"allocated_size", allocated},
                               {"active_size", allocated},
                               {"requested_size", requested},
                               {"stream", 0},
                               {"segment_type", seg.bytes > (1u << 20) ? "large" : "small"},
                               {"segment_pool_id", py_list{0, 0}},
                               {"is_expandable", false},
                               {"frames", py_list{}},
                               {"blocks", std::move(blocks)}});
  }
  std::vector<py_list> traces(static_cast<std::size_t>(std::max(max_device + 1, 1)));
  std::map<std::uintptr_t, bool> cache_blocks; // addresses of live observed caches' blocks
  auto exported_block = [&](const gmem::trace::event& e) {
    if (e.kind == gmem::trace::alloc_kind::tensor) return true;
    if (!is_pooled_kind(e.kind)) return false;
    if (e.type == gmem::trace::event_type::alloc) {
      if (!caches.is_cache(e.stack_id, e.kind)) return true;
      cache_blocks[e.address] = true;
      return false;
    }
    return cache_blocks.erase(e.address) == 0; // the free of a cache's block: not exported
  };
  for (const auto& e : t.events) {
    if (e.device < 0 || e.device > max_device || !exported(e.type)) continue;
    using gmem::trace::event_type;
    py_list& out = traces[static_cast<std::size_t>(e.device)];
    const double time_us = static_cast<double>(e.time_ns) / 1000.0;
    auto add = [&](const char* action, std::uint64_t addr, std::uint64_t size, py_value f) {
      out.push_back(py_dict{{"action", action},
                            {"addr", addr},
                            {"size", size},
                            {"stream", stream_of(e.stream)},
                            {"time_us", time_us},
                            {"frames", std::move(f)}});
    };
    switch (e.type) {
    case event_type::alloc:
      if (exported_block(e))
        add("alloc", e.address, std::max(e.size2, e.size), frames.get(e.stack_id));
      break;
    case event_type::free:
      if (exported_block(e)) {
        add("free_requested", e.address, std::max(e.size2, e.size), py_list{});
        add("free_completed", e.address, std::max(e.size2, e.size), py_list{});
      }
      break;
    case event_type::segment_map:
      add("segment_alloc", e.address, e.size, py_list{});
      break;
    case event_type::segment_unmap:
      add("segment_free", e.address, e.size, py_list{});
      break;
    case event_type::oom:
      out.push_back(py_dict{{"action", "oom"},
                            {"addr", 0},
                            {"size", e.size},
                            {"stream", 0},
                            {"time_us", time_us},
                            {"device_free", 0},
                            {"frames", frames.get(e.stack_id)}});
      break;
    default:
      break;
    }
  }
  py_list device_traces;
  for (auto& d : traces)
    device_traces.push_back(std::move(d));
  return py_dict{{"segments", std::move(segments)},
                 {"device_traces", std::move(device_traces)},
                 {"allocator_settings", py_dict{{"generator", "gmem export --format pytorch"}}}};
}

} // namespace gmem::tools
