#include "profiler/reader/trace_open.h"

#include <cstddef>
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

read_result open_shm_as(const std::string& name, const read_options& options,
                        std::uint32_t* owner) {
  std::uint32_t pid = 0;
  std::uint64_t ticks = 0;
  if (!parse_object_name(name, &pid, &ticks))
    return fail(name + ": not a gmem trace name (gmem.<pid>.<ticks>)");
  // A trace grows while it is written: a copy taken as it grew may hold a header that names
  // more bytes than were copied. A few more copies catch it between two growths.
  read_result r;
  std::unique_ptr<private_copy> copy;
  for (int attempt = 0; attempt < 4; ++attempt) {
    copy = std::make_unique<private_copy>();
    std::string why;
    if (!copy->read(k_shm_dir + name, true, &why))
      return fail(name + ": cannot open the trace: " + why);
    r = decode(copy->bytes(), options);
    if (r || r.error.offset != offsetof(layout::header, total_bytes)) break;
  }
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
  if (!copy.read(path, false, &why)) return fail(path + ": " + why);
  read_result r = decode(copy.bytes(), options);
  if (!r) {
    r.error.message = path + ": " + r.error.message;
    return r;
  }
  r.value.info.source = path;
  r.value.info.saved_file = true;
  return r;
}

read_result open_shm(const std::string& name, const read_options& options) {
  return open_shm_as(name, options, nullptr);
}

read_result open_shm(const std::string& name, const read_options& options, std::uint32_t* owner) {
  return open_shm_as(name, options, owner);
}

} // namespace gmem::trace
