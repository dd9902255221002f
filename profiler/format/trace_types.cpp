#include "profiler/format/trace_types.h"

namespace gmem::trace {

const char* to_string(alloc_kind kind) noexcept {
  switch (kind) {
  case alloc_kind::device:
    return "device";
  case alloc_kind::async:
    return "async";
  case alloc_kind::host_pinned:
    return "host_pinned";
  case alloc_kind::managed:
    return "managed";
  case alloc_kind::pitched:
    return "pitched";
  case alloc_kind::vmm:
    return "vmm";
  case alloc_kind::ipc:
    return "ipc";
  case alloc_kind::mempool:
    return "mempool";
  case alloc_kind::capture: // graph memory (docs/trace-format.md): captured or a memory node
    return "graph";
  case alloc_kind::passthrough:
    return "passthrough";
  case alloc_kind::tensor:
    return "tensor";
  }
  return "unknown";
}

const char* to_string(event_type type) noexcept {
  switch (type) {
  case event_type::alloc:
    return "alloc";
  case event_type::free:
    return "free";
  case event_type::segment_map:
    return "segment_map";
  case event_type::segment_unmap:
    return "segment_unmap";
  case event_type::fence:
    return "fence";
  case event_type::trim:
    return "trim";
  case event_type::oom:
    return "oom";
  case event_type::option:
    return "option";
  case event_type::marker:
    return "marker";
  }
  return "unknown";
}

const char* to_string(sample_reason reason) noexcept {
  switch (reason) {
  case sample_reason::periodic:
    return "periodic";
  case sample_reason::oom:
    return "oom";
  case sample_reason::final:
    return "final";
  }
  return "unknown";
}

} // namespace gmem::trace
