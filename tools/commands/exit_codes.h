// Exit statuses of the gmem command, documented in docs/tools.md and `gmem --help`.
// `gmem run` instead exits with the program's own status (128+signal when it was killed).
#pragma once

#include <string>
#include <utility>

namespace gmem::tools {

enum exit_code : int {
  k_exit_ok = 0,
  k_exit_leaks = 1,       // `gmem leaks` found outstanding allocations (like LeakSanitizer)
  k_exit_usage = 2,       // bad command line
  k_exit_not_found = 3,   // no such pid, not traced, no such file
  k_exit_bad_trace = 4,   // corrupt, truncated, other format version, died mid-update
  k_exit_permission = 5,  // the trace exists but may not be read / removed by this user
  k_exit_io = 6,          // could not write the output file, or another system error
  k_exit_cannot_run = 127 // `gmem run`: the program could not be started
};

// A failure the user can act on: printed as "gmem: error: <message>" and mapped to an exit code.
struct tool_error {
  exit_code code = k_exit_io;
  std::string message;
};

} // namespace gmem::tools
