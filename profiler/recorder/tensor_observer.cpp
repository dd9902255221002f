#include "profiler/recorder/tensor_observer.h"

#include <cstring>

namespace gmem::trace {
namespace {

bool fits(std::uint32_t offset, std::uint32_t width, std::uint32_t entry_bytes) {
  return offset % width == 0 && offset <= entry_bytes && width <= entry_bytes - offset;
}

template <typename T> T read_at(const void* entry, std::uint32_t offset) noexcept {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(entry) + offset, sizeof v);
  return v;
}

std::string hex(std::uintptr_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

} // namespace

std::string validate(const torch_layout& l) {
  if (l.struct_bytes != sizeof(torch_layout)) return "a layout descriptor of another size";
  if (l.version != k_torch_layout_version) return "a layout descriptor of another version";
  // A vtable slot beyond any class PyTorch has, or a TraceEntry larger than a page: not a row
  // of the table.
  if (l.attach_slot == 0 || l.attach_slot > 512) return "an implausible vtable slot";
  if (l.entry_bytes == 0 || l.entry_bytes > 4096) return "an implausible TraceEntry size";
  if (!fits(l.action_offset, 4, l.entry_bytes) || !fits(l.device_offset, 1, l.entry_bytes) ||
      !fits(l.addr_offset, 8, l.entry_bytes) || !fits(l.stream_offset, 8, l.entry_bytes) ||
      !fits(l.size_offset, 8, l.entry_bytes))
    return "a field outside the TraceEntry";
  if (l.action_alloc < 0 || l.action_free < 0 || l.action_alloc == l.action_free ||
      l.action_max < l.action_alloc || l.action_max < l.action_free || l.action_max > 255)
    return "implausible action numbers";
  if ((l.flags & ~k_check_owner) != 0 || l.reserved != 0) return "unknown flags";
  return {};
}

observed_event decode(const torch_layout& l, const void* entry) noexcept {
  observed_event e;
  e.action = read_at<std::int32_t>(entry, l.action_offset);
  e.device = read_at<std::int8_t>(entry, l.device_offset);
  e.address = read_at<std::uint64_t>(entry, l.addr_offset);
  e.size = read_at<std::uint64_t>(entry, l.size_offset);
  e.stream = read_at<std::uint64_t>(entry, l.stream_offset);
  e.type = e.action == l.action_alloc  ? observed_event::what::alloc
           : e.action == l.action_free ? observed_event::what::free
                                       : observed_event::what::other;
  return e;
}

std::string check_event(const observed_event& e, std::int32_t action_max) {
  if (e.action < 0 || e.action > action_max)
    return "action " + std::to_string(e.action) + " is out of range";
  if (e.device < 0 || e.device >= k_max_observed_devices)
    return "device " + std::to_string(e.device) + " is out of range";
  if (e.type == observed_event::what::other) return {};
  if (e.address == 0) return "a block at address 0";
  // A user-space address fits in 57 bits; anything above is a misread field.
  if ((e.address >> 57) != 0) return "a block at " + hex(e.address);
  if (e.type == observed_event::what::alloc) {
    if (e.size == 0) return "a block of 0 bytes";
    if ((e.size >> 48) != 0) return "a block of " + std::to_string(e.size) + " bytes";
  }
  return {};
}

bool sanity_gate::admit(const observed_event& e, std::int32_t action_max, owner_fn owner,
                        std::string* why) noexcept {
  if (closed_.load(std::memory_order_relaxed)) return false;
  if (checked_.load(std::memory_order_relaxed) >= k_checked_events) return true;
  std::string problem;
  try {
    problem = check_event(e, action_max);
    if (problem.empty() && owner != nullptr && e.type == observed_event::what::alloc &&
        owned_.load(std::memory_order_relaxed) == 0) {
      if (owner(e.address))
        owned_.fetch_add(1, std::memory_order_relaxed);
      else if (foreign_.fetch_add(1, std::memory_order_relaxed) + 1 >= k_owner_probes)
        problem = "its first " + std::to_string(k_owner_probes) +
                  " blocks outside every segment gmem handed out (the last at " + hex(e.address) +
                  ")";
    }
  } catch (...) {
    problem = "no memory to check an event";
  }
  if (!problem.empty()) {
    if (!closed_.exchange(true) && why != nullptr) *why = std::move(problem);
    return false;
  }
  checked_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

} // namespace gmem::trace
