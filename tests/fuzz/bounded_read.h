// The fuzz targets' bounded read: the input as a file (a memfd), opened as the listings and the
// exporter open another user's object, reading at most `max_copy_bytes` of it (private_copy.h,
// copy_limits: sections cut or left out in the copy's header). What it copied is checked
// against the bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <sys/mman.h>
#include <unistd.h>

#include "profiler/reader/trace_open.h"

namespace gmem::fuzz {

inline gmem::trace::read_result read_bounded(const std::uint8_t* data, std::size_t size,
                                             const gmem::trace::read_options& options) {
  const int fd = memfd_create("gmem_fuzz", MFD_CLOEXEC);
  if (fd < 0) return {};
  for (std::size_t at = 0; at < size;) {
    const ssize_t n = pwrite(fd, data + at, size - at, static_cast<off_t>(at));
    if (n <= 0) break;
    at += static_cast<std::size_t>(n);
  }
  gmem::trace::read_result r =
      gmem::trace::open_file("/proc/self/fd/" + std::to_string(fd), options);
  close(fd);
  // The header (its first 8192 bytes) is read whole; past it, never more than the bound.
  const std::uint64_t most = options.max_copy_bytes > 8192 ? options.max_copy_bytes : 8192;
  if (options.max_copy_bytes != 0 && r.value.info.copied_bytes > most) __builtin_trap();
  return r;
}

} // namespace gmem::fuzz
