// Placeholder until the decoder lands: every entry point reports that it cannot read yet.
#include "profiler/trace_reader.h"

namespace gmem::trace {

std::string read_error::to_string() const {
  return "byte " + std::to_string(offset) + ": " + message;
}

const char* to_string(trace_state state) noexcept {
  switch (state) {
  case trace_state::running:
    return "running";
  case trace_state::exited:
    return "exited";
  case trace_state::crashed:
    return "crashed";
  }
  return "unknown";
}

read_result decode(std::span<const std::byte>, const read_options&) {
  read_result r;
  r.error = {0, "trace reader not implemented yet"};
  return r;
}

} // namespace gmem::trace
