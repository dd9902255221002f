// Call-site identity shared by the growth report, trace diffs and the Prometheus exporter: a
// stack, symbolized, with the shim's own frames removed, is a call site; two stack ids that
// print the same are one site. Each site gets a stable short id (a hash of its printed frames,
// the same on every host and in every run of the same binaries) and a label naming its first
// meaningful frame, so a site can be followed across scrapes, processes and saved traces.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "profiler/format/trace_model.h"
#include "tools/frameworks.h"
#include "tools/symbolizer.h"

namespace gmem::tools {

struct call_site {
  std::string key;                // symbolized identity: every frame's name and location
  std::string id;                 // 12 lower-case hex digits of a 64-bit FNV-1a hash of `key`
  std::string label;              // first meaningful frame, escaped, at most k_site_label_max
  std::string caller;             // the frame after it, likewise ("" when there is none)
  std::vector<frame_info> frames; // innermost first, the shim's frames removed
  const framework_cache* held_by = nullptr; // a framework's cache (frameworks.h), if it is one
};

inline constexpr std::size_t k_site_label_max = 120;

// Frames a site label skips: the CUDA runtime's and driver's entry points and wrappers
// (cudaMalloc, cuMemAlloc_v2, cudart::..., frames in libcuda / libcudart), so the label names
// the program's own code. Frames are never skipped from the stack itself.
bool is_allocator_frame(const frame_info& f);

// "fn at file.cpp:42" or "libfoo.so+0x1234" for the first frame that is not an allocator
// frame (the innermost frame when all are); "(no stack)" for an empty stack. Escaped with
// escape_text() and cut to k_site_label_max bytes (on a UTF-8 boundary). `caller`, when not
// null, gets the next frame the same way ("" when there is none): the innermost meaningful
// frame is often the program's own allocation helper, and its caller tells sites apart.
std::string site_label(const std::vector<frame_info>& frames, std::string* caller = nullptr);

// 12 hex digits of a hash of a site's key (stack_key() of its shown stack).
std::string site_id(const std::string& key);

// Stack id -> call site for one trace, cached: a stack id names the same stack for the whole
// life of a trace, so the exporter keeps one resolver per process across scrapes and each
// stack is symbolized once. Invariant: sites_ never shrinks and every cached index is < its
// size; two stack ids with one key share one index.
class site_resolver {
public:
  // `symbols` must outlive the resolver.
  explicit site_resolver(symbolizer& symbols) : symbols_(symbols) {}
  // Index of the site of `stack_id` (0 and unknown ids: the "(no stack)" site) for an
  // allocation of `kind`: a tensor (alloc_kind::tensor) is the program's, never a cache's,
  // though its stack runs through the cache's code.
  std::size_t site_of(const gmem::trace::trace& t, std::uint32_t stack_id,
                      gmem::trace::alloc_kind kind = gmem::trace::alloc_kind::device);
  const call_site& site(std::size_t index) const { return sites_[index]; }
  std::size_t size() const { return sites_.size(); }

private:
  symbolizer& symbols_;
  std::vector<call_site> sites_;
  std::unordered_map<std::uint64_t, std::size_t> by_stack_; // stack id * 2 + is a tensor
  std::unordered_map<std::string, std::size_t> by_key_;
};

} // namespace gmem::tools
