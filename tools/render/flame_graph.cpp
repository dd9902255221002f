#include "tools/render/flame_graph.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <unordered_map>

#include "common/units.h"
#include "tools/render/svg_charts.h"

namespace gmem::tools {
namespace {

constexpr int k_row = 17;
constexpr std::size_t k_max_depth = 64;

struct node {
  std::string label;
  bool python = false;
  std::uint64_t bytes = 0;
  std::map<std::string, std::unique_ptr<node>> children; // by label: deterministic order
};

std::string label_of(const frame_info& f) {
  return f.file.empty() ? f.name() : f.name() + " (" + f.location() + ")";
}

// Warm for native frames, cool for Python ones; the shade varies with the name so neighbours
// differ, deterministically.
std::string colour(const node& n) {
  unsigned h = 2166136261u;
  for (const char c : n.label)
    h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
  char b[16];
  if (n.python)
    std::snprintf(b, sizeof b, "#%02x%02x%02x", 90 + h % 40, 150 + (h >> 8) % 50,
                  200 + (h >> 16) % 40);
  else
    std::snprintf(b, sizeof b, "#%02x%02x%02x", 225 + h % 25, 110 + (h >> 8) % 80,
                  50 + (h >> 16) % 30);
  return b;
}

struct drawer {
  std::string svg;
  double scale = 0; // pixels per byte
  std::uint64_t min_bytes = 0;
  std::size_t drawn = 0;
  int depth_max = 0;
  int height = 0;

  void draw(const node& n, double x, int depth) {
    if (n.bytes < min_bytes || drawn >= k_max_flame_frames) return;
    ++drawn;
    const double w = static_cast<double>(n.bytes) * scale;
    const int y = height - (depth + 1) * k_row;
    char head[256];
    std::snprintf(head, sizeof head,
                  "<g><title>%s: %s</title><rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" "
                  "height=\"%d\" fill=\"%s\" rx=\"2\"/>",
                  "%s", format_bytes(n.bytes).c_str(), x, y, std::max(w - 0.5, 0.5), k_row - 1,
                  colour(n).c_str());
    std::string g = head;
    g.replace(g.find("%s"), 2, html_escape(n.label));
    const std::size_t fits = w > 24 ? static_cast<std::size_t>((w - 6) / 6.6) : 0;
    if (fits >= 3) {
      std::string text = n.label.size() > fits ? n.label.substr(0, fits - 2) + ".." : n.label;
      char t[64];
      std::snprintf(t, sizeof t, "<text x=\"%.1f\" y=\"%d\">", x + 3, y + k_row - 5);
      g += t + html_escape(text) + "</text>";
    }
    svg += g + "</g>\n";
    double cx = x;
    for (const auto& [label, c] : n.children) {
      draw(*c, cx, depth + 1);
      cx += static_cast<double>(c->bytes) * scale;
    }
  }
};

int depth_of(const node& n, int d) {
  int m = d;
  for (const auto& [label, c] : n.children)
    m = std::max(m, depth_of(*c, d + 1));
  return m;
}

// Requested bytes per stack id, by stack id.
std::vector<stack_bytes> bytes_by_stack(const std::vector<gmem::trace::live_allocation>& live) {
  std::unordered_map<std::uint32_t, std::uint64_t> by;
  for (const auto& a : live)
    by[a.stack_id] += a.requested;
  std::vector<stack_bytes> out;
  for (const auto& [id, b] : by)
    out.push_back({id, b});
  std::sort(out.begin(), out.end(),
            [](const stack_bytes& a, const stack_bytes& b) { return a.stack_id < b.stack_id; });
  return out;
}

} // namespace

std::vector<stack_bytes> outstanding_by_stack(const gmem::trace::trace& t) {
  return bytes_by_stack(t.live);
}

std::vector<gmem::trace::live_allocation> live_at_peak(const gmem::trace::trace& t,
                                                       std::uint64_t since_ns, bool* complete,
                                                       std::uint64_t* peak_time_ns) {
  using gmem::trace::event_type;
  using live_map = std::unordered_map<std::uintptr_t, gmem::trace::live_allocation>;
  *complete = t.losses.lost_events == 0;
  live_map now;
  std::uint64_t now_total = 0;
  for (const auto& a : t.live)
    if (now.try_emplace(gmem::trace::live_key(a.address, a.kind), a).second)
      now_total += a.requested;
  const auto& ev = t.events;
  // Steps the state back over `e`: afterwards it is the state just before `e`. A free re-adds
  // its allocation with what the free event knows; the allocating event, further back, fills
  // in its stack, thread and time (stack_id stays 0 until then).
  auto step_back = [](live_map& live, std::uint64_t& total, const gmem::trace::event& e) {
    if (e.type == event_type::alloc) {
      if (auto it = live.find(gmem::trace::live_key(e.address, e.kind)); it != live.end()) {
        total -= it->second.requested;
        live.erase(it);
      }
    } else if (e.type == event_type::free) {
      gmem::trace::live_allocation& a = live[gmem::trace::live_key(e.address, e.kind)];
      total -= a.requested;
      a = {};
      a.address = e.address;
      a.requested = e.size;
      a.rounded = std::max(e.size2, e.size);
      a.device = e.device;
      a.stream = e.stream;
      a.kind = e.kind;
      a.time_ns = ~std::uint64_t{0}; // not resolved yet
      total += e.size;
    }
  };
  // States, newest first: k = ev.size() is the present; state k holds after event k-1 and
  // until event k. It is a candidate when it held at or after since_ns. Pass 1 finds the
  // largest (the newest of equals); pass 2 rebuilds it.
  std::size_t best = ev.size();
  std::uint64_t best_total = now_total;
  {
    live_map live = now;
    std::uint64_t total = now_total;
    for (std::size_t k = ev.size(); k-- > 0;) {
      step_back(live, total, ev[k]);
      if (ev[k].time_ns < since_ns) break; // state k held only before since_ns
      if (total > best_total) best_total = total, best = k;
    }
  }
  live_map live = std::move(now);
  std::uint64_t total = now_total;
  for (std::size_t k = ev.size(); k-- > best;)
    step_back(live, total, ev[k]);
  std::size_t unresolved = 0;
  for (const auto& [address, a] : live)
    unresolved += a.time_ns == ~std::uint64_t{0};
  for (std::size_t k = best; unresolved != 0 && k-- > 0;) {
    const auto& e = ev[k];
    if (e.type != event_type::alloc) continue;
    auto it = live.find(e.address);
    if (it == live.end() || it->second.time_ns != ~std::uint64_t{0}) continue;
    it->second.stack_id = e.stack_id;
    it->second.thread = e.thread;
    it->second.time_ns = e.time_ns;
    --unresolved;
  }
  if (best == ev.size())
    *peak_time_ns = ev.empty() ? 0 : std::max(ev.back().time_ns, since_ns);
  else
    *peak_time_ns = best > 0 ? std::max(ev[best - 1].time_ns, since_ns) : ev[best].time_ns;
  std::vector<gmem::trace::live_allocation> out;
  out.reserve(live.size());
  for (auto& [address, a] : live) {
    if (a.time_ns == ~std::uint64_t{0}) a.time_ns = 0; // made before the ring's window
    out.push_back(a);
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.address < b.address; });
  return out;
}

std::vector<stack_bytes> live_at_peak_by_stack(const gmem::trace::trace& t, bool* complete,
                                               std::uint64_t* peak_time_ns) {
  return bytes_by_stack(live_at_peak(t, 0, complete, peak_time_ns));
}

std::string flame_svg(const gmem::trace::trace& t, symbolizer& symbols,
                      const std::vector<stack_bytes>& input, int width) {
  node root;
  root.label = "all";
  for (const auto& s : input) {
    if (s.bytes == 0) continue;
    root.bytes += s.bytes;
    std::vector<frame_info> frames;
    if (s.stack_id != 0) frames = show_stack(t, s.stack_id, symbols, frame_view::mixed).frames;
    node* at = &root;
    std::size_t depth = 0;
    for (auto f = frames.rbegin(); f != frames.rend() && depth < k_max_depth; ++f, ++depth) {
      auto& child = at->children[label_of(*f)];
      if (!child) {
        child = std::make_unique<node>();
        child->label = label_of(*f);
        child->python = f->python;
      }
      child->bytes += s.bytes;
      at = child.get();
    }
  }
  if (root.bytes == 0) return {};
  drawer d;
  d.scale = static_cast<double>(width) / static_cast<double>(root.bytes);
  d.min_bytes = static_cast<std::uint64_t>(0.5 / d.scale); // narrower than half a pixel
  d.height = (depth_of(root, 0) + 1) * k_row;
  d.draw(root, 0, 0);
  char head[200];
  std::snprintf(head, sizeof head,
                "<svg class=\"flame\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" "
                "height=\"%d\" viewBox=\"0 0 %d %d\" font-size=\"11\" "
                "font-family=\"ui-monospace,Menlo,monospace\">\n",
                width, d.height, width, d.height);
  return head + d.svg + "</svg>\n";
}

} // namespace gmem::tools
