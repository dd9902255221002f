#include "profiler/reader/trace_save.h"

#include <algorithm>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstring>
#include <unistd.h>
#include <vector>

#include "common/safe_file.h"
#include "profiler/format/trace_layout.h"
#include "profiler/reader/object_names.h"
#include "profiler/reader/private_copy.h"
#include "profiler/reader/process_identity.h"

namespace gmem::trace {

namespace bip = boost::interprocess;

bool save_bytes(std::span<const std::byte> bytes, const std::string& path, bool snapshot,
                std::string* error) {
  auto set_error = [&](const std::string& what) {
    if (error) *error = path + ": " + what + ": " + std::strerror(errno);
    return false;
  };
  // A new file of ours beside the target (mkstemp: O_EXCL, 0600), never a name someone else
  // may have planted; fsync()ed, then renamed to the target only if nothing or a regular file
  // of ours is there (a symlink, FIFO or device node there is neither followed nor replaced).
  std::string tmp;
  const int fd = create_temp_beside(path, &tmp);
  if (fd < 0) return set_error("cannot create a temporary file beside it");
  constexpr std::size_t k_page = 4096;
  std::vector<std::byte> page(k_page);
  bool ok = true;
  for (std::size_t at = 0; ok && at < bytes.size(); at += k_page) {
    const std::size_t n = std::min(k_page, bytes.size() - at);
    for (std::size_t k = 0; k < n; k += 8) { // atomic word copies: the writer may be running
      std::uint64_t w = 0;
      if (n - k >= 8 && reinterpret_cast<std::uintptr_t>(bytes.data() + at + k) % 8 == 0)
        w = layout::load_word(reinterpret_cast<const std::uint64_t*>(bytes.data() + at + k));
      else
        std::memcpy(&w, bytes.data() + at + k, std::min<std::size_t>(8, n - k));
      std::memcpy(page.data() + k, &w, std::min<std::size_t>(8, n - k));
    }
    if (at == 0 && snapshot && n >= offsetof(layout::header, flags) + 8) {
      std::uint64_t flags;
      std::memcpy(&flags, page.data() + offsetof(layout::header, flags), 8);
      flags |= layout::k_flag_snapshot;
      std::memcpy(page.data() + offsetof(layout::header, flags), &flags, 8);
    }
    const bool zero = std::all_of(page.begin(), page.begin() + static_cast<std::ptrdiff_t>(n),
                                  [](std::byte b) { return b == std::byte{0}; });
    if (zero && n == k_page) continue; // a hole
    ok = ::pwrite(fd, page.data(), n, static_cast<off_t>(at)) == static_cast<ssize_t>(n);
  }
  ok = ok && ::ftruncate(fd, static_cast<off_t>(bytes.size())) == 0;
  if (!ok) {
    set_error("cannot write");
    ::close(fd);
    ::unlink(tmp.c_str());
    return false;
  }
  return commit_temp_over_own_file(fd, tmp, path, error);
}

bool save_shm(const std::string& name, const std::string& path, std::string* error) {
  std::uint32_t pid = 0;
  std::uint64_t ticks = 0;
  if (!parse_object_name(name, &pid, &ticks)) {
    if (error) *error = name + ": not a gmem trace name (gmem.<pid>.<ticks>)";
    return false;
  }
  private_copy copy;
  std::string why;
  if (!copy.read(k_shm_dir + name, true, &why)) {
    if (error) *error = name + ": cannot open the trace: " + why;
    return false;
  }
  const bool alive = alive_as(pid, ticks, copy.file_stat().st_uid);
  return save_bytes(copy.bytes(), path, alive, error);
}

bool remove_shm(const std::string& name, std::string* error) {
  std::uint32_t pid = 0;
  std::uint64_t ticks = 0;
  if (!parse_object_name(name, &pid, &ticks)) {
    if (error) *error = name + ": not a gmem trace name (gmem.<pid>.<ticks>)";
    return false;
  }
  if (!bip::shared_memory_object::remove(name.c_str())) {
    if (error) *error = name + ": cannot remove: " + std::strerror(errno);
    return false;
  }
  return true;
}

} // namespace gmem::trace
