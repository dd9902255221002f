#include "tools/flame_graph.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <unordered_map>

#include "common/units.h"
#include "tools/leak_report.h"
#include "tools/svg_charts.h"
#include "tools/trace_facts.h"

namespace gmem::tools {
namespace {

using gmem::trace::event_type;

constexpr int k_row = 17; // pixels per frame row

flame_node& child(flame_node& parent, const std::string& label) {
  auto it = std::lower_bound(parent.children.begin(), parent.children.end(), label,
                             [](const flame_node& n, const std::string& l) { return n.label < l; });
  if (it == parent.children.end() || it->label != label) {
    flame_node n;
    n.label = label;
    it = parent.children.insert(it, std::move(n));
  }
  return *it;
}

std::size_t depth_of(const flame_node& n) {
  std::size_t d = 0;
  for (const auto& c : n.children)
    d = std::max(d, depth_of(c) + 1);
  return d;
}

// A warm colour that depends only on the label, so one function keeps its colour across
// both graphs; the boxes that stand for no frame ("(no stack recorded)", "(N more stacks)")
// are grey.
std::string colour(const std::string& label) {
  if (label.empty() || (label[0] == '(' && label.find("::") == std::string::npos)) return "#c8ccd4";
  const std::size_t h = std::hash<std::string>{}(label);
  char b[32];
  std::snprintf(b, sizeof b, "hsl(%zu,%zu%%,%zu%%)", 8 + h % 42, 65 + (h >> 8) % 25,
                58 + (h >> 16) % 12);
  return b;
}

struct drawer {
  const flame_node& root;
  double scale; // pixels per byte
  int height;
  std::size_t boxes = 0;
  std::string out;

  void draw(const flame_node& n, double x, std::size_t depth) {
    const double w = static_cast<double>(n.bytes) * scale;
    if (w < 1.0 || boxes >= k_max_flame_boxes) return; // summed into the parent's box
    ++boxes;
    const int y = height - static_cast<int>(depth + 1) * k_row;
    char geometry[160];
    std::snprintf(geometry, sizeof geometry,
                  "<g><rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"", x, y,
                  std::max(w - 0.5, 0.5), k_row - 1);
    const double share =
        root.bytes ? static_cast<double>(n.bytes) / static_cast<double>(root.bytes) : 0.0;
    char pct[16];
    std::snprintf(pct, sizeof pct, "%.1f%%", share * 100);
    out += geometry + colour(n.label) + "\"><title>" + html_escape(n.label) + "\n" +
           format_bytes(n.bytes) + " (" + pct + ")</title></rect>";
    const std::size_t chars = w > 14 ? static_cast<std::size_t>((w - 6) / 6.6) : 0;
    if (chars >= 3) {
      std::string text = n.label.size() <= chars ? n.label : n.label.substr(0, chars - 2) + "..";
      char pos[64];
      std::snprintf(pos, sizeof pos, "<text x=\"%.1f\" y=\"%d\">", x + 3, y + k_row - 5);
      out += pos + html_escape(text) + "</text>";
    }
    out += "</g>\n";
    double cx = x;
    for (const auto& c : n.children) {
      draw(c, cx, depth + 1);
      cx += static_cast<double>(c.bytes) * scale;
    }
  }
};

} // namespace

bool flame_node::is_valid() const {
  std::uint64_t sum = 0;
  for (std::size_t i = 0; i < children.size(); ++i) {
    if (i > 0 && !(children[i - 1].label < children[i].label)) return false;
    if (!children[i].is_valid()) return false;
    sum += children[i].bytes;
  }
  return sum <= bytes;
}

flame_node build_flame(std::vector<flame_stack> stacks, const std::string& root_label) {
  flame_node root;
  root.label = root_label;
  std::sort(stacks.begin(), stacks.end(),
            [](const flame_stack& a, const flame_stack& b) { return a.bytes > b.bytes; });
  std::uint64_t other_bytes = 0;
  std::size_t other_count = 0;
  for (std::size_t i = 0; i < stacks.size(); ++i) {
    const flame_stack& s = stacks[i];
    if (s.bytes == 0) continue;
    root.bytes += s.bytes;
    if (i >= k_max_flame_stacks) {
      other_bytes += s.bytes;
      ++other_count;
      continue;
    }
    flame_node* at = &root;
    const std::size_t depth = std::min(s.frames.size(), k_max_flame_depth);
    if (depth == 0) at = &child(*at, "(no stack recorded)");
    for (std::size_t d = 0; d < depth; ++d) {
      at = &child(*at, s.frames[d]);
      at->bytes += s.bytes;
    }
    if (depth == 0) at->bytes += s.bytes;
  }
  if (other_count != 0)
    child(root, "(" + std::to_string(other_count) + " more stacks)").bytes += other_bytes;
  return root;
}

peak_live_set live_at_peak(const gmem::trace::trace& t) {
  struct entry {
    std::uint64_t bytes = 0;
    std::uint32_t stack = 0;
    bool resolved = false;
  };
  std::unordered_map<std::uintptr_t, entry> now;
  std::uint64_t now_total = 0;
  for (const auto& a : t.live) {
    auto [it, fresh] = now.try_emplace(a.address, entry{a.requested, a.stack_id, true});
    if (fresh) now_total += a.requested;
  }
  const auto& ev = t.events;
  // Steps the state back over event i: afterwards it is the state just before event i.
  auto step_back = [](std::unordered_map<std::uintptr_t, entry>& live, std::uint64_t& total,
                      const gmem::trace::event& e) {
    if (e.type == event_type::alloc) {
      if (auto it = live.find(e.address); it != live.end()) {
        total -= it->second.bytes;
        live.erase(it);
      }
    } else if (e.type == event_type::free) {
      entry& x = live[e.address];
      total -= x.bytes;
      x = entry{e.size, 0, false};
      total += e.size;
    }
  };
  // Pass 1: where the total peaked (the latest such moment, so the live table wins ties).
  std::size_t best = ev.size();
  std::uint64_t best_total = now_total;
  {
    auto live = now;
    std::uint64_t total = now_total;
    for (std::size_t i = ev.size(); i-- > 0;) {
      step_back(live, total, ev[i]);
      if (total > best_total) {
        best_total = total;
        best = i;
      }
    }
  }
  // Pass 2: the set at that moment, then further back to the allocations that made it.
  auto live = std::move(now);
  std::uint64_t total = now_total;
  for (std::size_t i = ev.size(); i-- > best;)
    step_back(live, total, ev[i]);
  std::size_t unresolved = 0;
  for (const auto& [address, x] : live)
    unresolved += !x.resolved;
  for (std::size_t i = best; unresolved != 0 && i-- > 0;) {
    const auto& e = ev[i];
    if (e.type != event_type::alloc) continue;
    auto it = live.find(e.address);
    if (it == live.end() || it->second.resolved) continue;
    it->second.stack = e.stack_id;
    it->second.resolved = true;
    --unresolved;
  }
  peak_live_set r;
  r.bytes = total;
  r.complete = t.losses.lost_events == 0;
  if (best == ev.size())
    r.time_ns = trace_now_ns(t);
  else
    r.time_ns = best > 0 ? ev[best - 1].time_ns : ev[best].time_ns;
  std::unordered_map<std::uint32_t, std::uint64_t> by_stack;
  for (const auto& [address, x] : live)
    by_stack[x.resolved ? x.stack : 0] += x.bytes;
  r.bytes_by_stack.assign(by_stack.begin(), by_stack.end());
  std::sort(r.bytes_by_stack.begin(), r.bytes_by_stack.end());
  return r;
}

std::vector<flame_stack>
flame_stacks_of(const gmem::trace::trace& t, symbolizer& symbols,
                const std::vector<std::pair<std::uint32_t, std::uint64_t>>& bytes_by_stack) {
  std::vector<flame_stack> out;
  out.reserve(bytes_by_stack.size());
  for (const auto& [id, bytes] : bytes_by_stack) {
    flame_stack s;
    s.bytes = bytes;
    if (const auto* ips = t.stack(id)) {
      std::vector<frame_info> frames = visible_frames(*ips, symbols);
      for (auto f = frames.rbegin(); f != frames.rend(); ++f)
        s.frames.push_back(f->file.empty() ? f->name() : f->name() + " at " + f->location());
    } else if (id == 0 && t.info.stack_depth != 0) {
      s.frames.push_back("(allocated before the oldest recorded event)");
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string flame_svg(const flame_node& root, int width) {
  if (root.bytes == 0 || width <= 0) return "";
  const std::size_t depth = std::min(depth_of(root), k_max_flame_depth + 1) + 1;
  drawer d{root,
           static_cast<double>(width) / static_cast<double>(root.bytes),
           static_cast<int>(depth) * k_row + 2,
           0,
           {}};
  d.draw(root, 0, 0);
  char head[200];
  std::snprintf(head, sizeof head,
                "<svg class=\"flame\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                "height=\"%d\" viewBox=\"0 0 %d %d\">\n",
                width, d.height, width, d.height);
  return head + d.out + "</svg>\n";
}

} // namespace gmem::tools
