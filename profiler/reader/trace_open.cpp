#include "profiler/reader/trace_open.h"

#include <cstddef>
#include <cstring>
#include <memory>

#include "profiler/format/trace_layout.h"
#include "profiler/reader/object_names.h"
#include "profiler/reader/private_copy.h"
#include "profiler/reader/process_identity.h"

namespace gmem::trace {

namespace {

read_result fail(std::string message) {
  read_result r;
  r.error = {0, std::move(message)};
  return r;
}

// What a bounded read copies for `options`: the sections they decode.
copy_limits limits_for(const read_options& options) {
  namespace l = layout;
  copy_limits c;
  c.max_bytes = options.max_copy_bytes;
  c.sections = 1u << l::k_counters | 1u << l::k_string_slots | 1u << l::k_string_bytes |
               1u << l::k_modules | 1u << l::k_stack_slots | 1u << l::k_stack_ips;
  if (options.live) c.sections |= 1u << l::k_live | 1u << l::k_segments;
  if (options.samples) c.sections |= 1u << l::k_samples;
  if (options.events) c.sections |= 1u << l::k_events;
  return c;
}

// Decodes a (possibly bounded) copy: sections left out are not decoded.
read_result decode_copy(const private_copy& copy, read_options options) {
  namespace l = layout;
  const std::uint32_t cut = copy.cut_sections();
  if ((cut & (1u << l::k_live | 1u << l::k_segments)) != 0) options.live = false;
  if ((cut & 1u << l::k_samples) != 0) options.samples = false;
  if ((cut & 1u << l::k_events) != 0) options.events = false;
  read_result r = decode(copy.bytes(), options);
  r.value.info.copied_bytes = copy.copied_bytes();
  r.value.info.cut_sections = cut;
  return r;
}

read_result open_shm_as(const std::string& name, const read_options& options,
                        std::uint32_t* owner) {
  std::uint32_t pid = 0;
  std::uint64_t ticks = 0;
  if (!parse_object_name(name, &pid, &ticks))
    return fail(name + ": not a gmem trace name (gmem.<pid>.<ticks>)");
  // The header must name this object before the rest is copied: a large object whose first
  // page names another process (or none) costs one page. The copy is consistent with its
  // header (private_copy.h), so a failed decode is not worth a second copy.
  auto names_this_object = [&](std::span<const std::byte> page) -> std::string {
    std::uint32_t header_pid = 0;
    std::uint64_t header_ticks = 0;
    if (page.size() < offsetof(layout::header, proc_start_ticks) + sizeof header_ticks) return {};
    std::memcpy(&header_pid, page.data() + offsetof(layout::header, pid), sizeof header_pid);
    std::memcpy(&header_ticks, page.data() + offsetof(layout::header, proc_start_ticks),
                sizeof header_ticks);
    if (header_pid == pid && header_ticks == ticks) return {};
    return "the header says pid " + std::to_string(header_pid) + " started at tick " +
           std::to_string(header_ticks) + ": not the trace its name claims (forged or damaged)";
  };
  auto copy = std::make_unique<private_copy>();
  std::string why;
  if (!copy->read(k_shm_dir + name, true, &why, names_this_object, limits_for(options)))
    return fail(name + ": cannot open the trace: " + why);
  read_result r = decode_copy(*copy, options);
  if (owner) *owner = copy->file_stat().st_uid;
  if (!r) {
    r.error.message = name + ": " + r.error.message;
    return r;
  }
  auto& info = r.value.info;
  if (info.pid != pid || info.proc_start_ticks != ticks)
    return fail(name + ": the header says pid " + std::to_string(info.pid) + " started at tick " +
                std::to_string(info.proc_start_ticks) +
                ": not the trace its name claims (forged or damaged)");
  info.source = "shm " + name;
  info.object = name;
  info.owner_uid = copy->file_stat().st_uid;
  if (info.state != trace_state::exited)
    info.state = alive_as(pid, ticks, copy->file_stat().st_uid) ? trace_state::running
                                                                : trace_state::crashed;
  return r;
}
} // namespace

read_result open_file(const std::string& path, const read_options& options) {
  // A file the user named: symlinks are followed (the user chose the path), but only a
  // regular file is read, without blocking, into a private copy.
  private_copy copy;
  std::string why;
  if (!copy.read(path, false, &why, {}, limits_for(options))) return fail(path + ": " + why);
  read_result r = decode_copy(copy, options);
  if (!r) {
    r.error.message = path + ": " + r.error.message;
    return r;
  }
  r.value.info.source = path;
  r.value.info.saved_file = true;
  r.value.info.owner_uid = copy.file_stat().st_uid;
  return r;
}

read_result open_shm(const std::string& name, const read_options& options) {
  return open_shm_as(name, options, nullptr);
}

read_result open_shm(const std::string& name, const read_options& options, std::uint32_t* owner) {
  return open_shm_as(name, options, owner);
}

} // namespace gmem::trace
