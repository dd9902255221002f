// Finding and opening the trace a command names: a pid (the newest trace object of that
// process, live or left by a dead one), an object name ("gmem.<pid>.<ticks>.<nonce>") or a saved
// file. Every failure becomes a tool_error that names the thing, says what is wrong and what to do.
#pragma once

#include <string>

#include "profiler/reader/trace_reader.h"
#include "tools/analysis/trace_facts.h"
#include "tools/commands/exit_codes.h"

namespace gmem::tools {

struct open_result {
  bool ok = false;
  gmem::trace::trace value;
  tool_error error;
  // For a pid whose process is gone and whose trace another user owns: whose it is
  // ("gmem: note: ..."), to print before the report; "" otherwise.
  std::string note;
};

open_result open_trace(const std::string& target, const gmem::trace::read_options& = {});

// Warnings worth a line on stderr before a report (torn records, lost events, overflow).
std::string trace_warnings(const gmem::trace::trace& t);

bool is_pid(const std::string& s);

} // namespace gmem::tools
