// Leak suppressions, LeakSanitizer style: allocations that live as long as the process by
// design (CUDA library handles and workspaces) are listed apart from leaks and do not count in
// `gmem leaks`' exit status. A built-in default list covers cuBLAS, cuBLASLt, cuDNN, cuFFT,
// cuSOLVER, cuSPARSE and NCCL, PyTorch's pinned host cache and frameworks' CUDA graph memory;
// users add files (`--suppressions FILE`, format in docs/tools.md, "Suppressions"):
//
//   # comment
//   leak:PATTERN
//   leak.KIND:PATTERN      only allocations of that kind (e.g. leak.host_pinned:...)
//
// PATTERN matches a frame when it occurs in the frame's function name, source file or module
// path (Python frames: function or file); `*` matches any run of characters, a leading `^`
// anchors it at the start and a trailing `$` at the end. A call site is suppressed when any
// frame of its stack (Python and native, nothing folded) matches any pattern.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tools/symbolizer.h"

namespace gmem::tools {

struct suppression {
  std::string pattern;
  std::string origin; // "default" or "FILE:LINE"
  std::string kind;   // an alloc kind's name ("host_pinned"): only allocations of it; "" = any
};

class suppression_list {
public:
  // The built-in list (library-lifetime CUDA library allocations).
  static suppression_list defaults();
  // Parses suppression text; on a bad line returns nullopt and sets `error`
  // ("FILE:LINE: what"). `origin` names the text in errors and matches.
  static std::optional<suppression_list> parse(const std::string& text, const std::string& origin,
                                               std::string* error);
  // Reads and parses a file the user named: a regular file of at most 1 MiB, opened without
  // blocking (a FIFO cannot hang us).
  static std::optional<suppression_list> load(const std::string& path, std::string* error);

  void append(const suppression_list& other);
  // The first suppression matching a frame of `frames` (and `kind`, for a kind-qualified one),
  // or nullptr.
  const suppression* match(const std::vector<frame_info>& frames,
                           const std::string& kind = {}) const;
  const std::vector<suppression>& entries() const { return entries_; }

private:
  std::vector<suppression> entries_;
};

// Glob match of `pattern` inside `text` as described above.
bool pattern_matches(const std::string& pattern, const std::string& text);

} // namespace gmem::tools
