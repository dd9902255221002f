#include "tools/analysis/call_sites.h"

#include <cstdio>

#include "common/escape.h"
#include "tools/analysis/leak_report.h"
#include "tools/stack_view.h"

namespace gmem::tools {
namespace {

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Cuts `s` to at most `max` bytes without splitting a UTF-8 sequence.
std::string cut_utf8(std::string s, std::size_t max) {
  if (s.size() <= max) return s;
  std::size_t n = max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xc0) == 0x80)
    --n;
  s.resize(n);
  return s;
}

} // namespace

bool is_allocator_frame(const frame_info& f) {
  const std::string mod = base_name(f.module);
  if (starts_with(mod, "libcuda.so") || starts_with(mod, "libcudart.so")) return true;
  const std::string& fn = f.function;
  if (starts_with(fn, "cudart::") || starts_with(fn, "cudaMalloc") || starts_with(fn, "cudaFree"))
    return true;
  // Driver entry points: cuMemAlloc_v2, cuMemAllocAsync, cuMemHostAlloc, ...
  return starts_with(fn, "cuMem");
}

std::string site_label(const std::vector<frame_info>& frames, std::string* caller) {
  if (caller != nullptr) caller->clear();
  if (frames.empty()) return "(no stack)";
  std::size_t pick = 0;
  for (std::size_t i = 0; i < frames.size(); ++i)
    if (!is_allocator_frame(frames[i])) {
      pick = i;
      break;
    }
  auto text = [](const frame_info& f) {
    std::string s = f.name();
    if (!f.file.empty()) s += " at " + f.location();
    return cut_utf8(escape_text(s), k_site_label_max);
  };
  // A Python line's caller is a Python frame: a native frame after them is the allocator's.
  if (caller != nullptr && pick + 1 < frames.size() &&
      (!frames[pick].python || frames[pick + 1].python))
    *caller = text(frames[pick + 1]);
  return text(frames[pick]);
}

std::string site_id(const std::string& key) {
  std::uint64_t h = 14695981039346656037ull; // FNV-1a, 64 bits
  for (const char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return std::string(buf, 12);
}

std::size_t site_resolver::site_of(const gmem::trace::trace& t, std::uint32_t stack_id,
                                   gmem::trace::alloc_kind kind) {
  const bool tensor = kind == gmem::trace::alloc_kind::tensor;
  const std::uint64_t memo = std::uint64_t{stack_id} * 2 + (tensor ? 1 : 0);
  if (auto it = by_stack_.find(memo); it != by_stack_.end()) return it->second;
  // The leak report's identity of a site (Python frames first, internals folded), so the
  // exporter, growth, diff and oom name the sites `gmem leaks` names.
  shown_stack shown = show_stack(t, stack_id, symbols_, frame_view::python_first);
  std::string key = stack_key(shown);
  // A framework cache's segments are a site apart from the program's tensors of the same line.
  const framework_cache* held_by =
      tensor ? nullptr : framework_cache_of(all_frames(t, stack_id, symbols_), t.info.options);
  if (held_by != nullptr) key.insert(0, std::string("C") + held_by->cache + '\x1f');
  std::vector<frame_info> frames = std::move(shown.frames);
  auto k = by_key_.find(key);
  if (k == by_key_.end()) {
    call_site s;
    s.id = site_id(key);
    s.label = site_label(frames, &s.caller);
    s.key = key;
    s.frames = std::move(frames);
    s.held_by = held_by;
    sites_.push_back(std::move(s));
    k = by_key_.emplace(std::move(key), sites_.size() - 1).first;
  }
  by_stack_.emplace(memo, k->second);
  return k->second;
}

} // namespace gmem::tools
