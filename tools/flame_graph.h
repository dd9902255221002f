// Flame graphs of bytes by call stack for the HTML report: the outstanding (leaked) bytes, and
// the bytes live at the trace's peak, rebuilt from the event ring. Drawn as inline SVG with a
// <title> per box (the browser's tooltip), so the report still needs no script.
//
// A trace is hostile input: the tree is bounded (at most k_max_flame_stacks stacks, the rest
// summed into one "other stacks" box; at most k_max_flame_depth frames each) and so is the
// drawing (boxes narrower than a pixel are summed into their parent, at most
// k_max_flame_boxes boxes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "profiler/trace_model.h"
#include "tools/symbolizer.h"

namespace gmem::tools {

inline constexpr std::size_t k_max_flame_stacks = 4000;
inline constexpr std::size_t k_max_flame_depth = 64;
inline constexpr std::size_t k_max_flame_boxes = 3000;

// One stack's bytes. Frames outermost first (the root's side).
struct flame_stack {
  std::vector<std::string> frames;
  std::uint64_t bytes = 0;
};

// Invariant (is_valid): a node's bytes are at least the sum of its children's; children are
// sorted by label, unique.
struct flame_node {
  std::string label;
  std::uint64_t bytes = 0;
  std::vector<flame_node> children;
  bool is_valid() const;
};

// Merges stacks into a tree under a root labelled `root_label`. Stacks beyond the
// k_max_flame_stacks largest are summed into one child "(N more stacks)"; frames beyond
// k_max_flame_depth are cut (the stack's bytes stay on the last kept frame).
flame_node build_flame(std::vector<flame_stack> stacks, const std::string& root_label);

// The live allocations at the moment their requested bytes peaked, by stack id, replayed back
// from the live table through the event ring. Bytes whose stack is unknown (allocated before
// the ring's oldest event) are under stack id 0.
struct peak_live_set {
  std::uint64_t time_ns = 0;
  std::uint64_t bytes = 0;
  std::vector<std::pair<std::uint32_t, std::uint64_t>> bytes_by_stack; // sorted by stack id
  bool complete = true; // false: the ring lost events, so the peak may be older than it shows
};
peak_live_set live_at_peak(const gmem::trace::trace& t);

// The flame_stacks of (stack id, bytes) pairs, symbolized as the leak report shows them.
std::vector<flame_stack>
flame_stacks_of(const gmem::trace::trace& t, symbolizer& symbols,
                const std::vector<std::pair<std::uint32_t, std::uint64_t>>& bytes_by_stack);

// SVG of the tree, root at the bottom, `width` pixels wide; "" when the root has no bytes.
std::string flame_svg(const flame_node& root, int width);

} // namespace gmem::tools
