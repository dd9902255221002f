#include "profiler/reader/private_copy.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "profiler/format/trace_layout.h"

namespace gmem::trace {
namespace {

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

} // namespace

private_copy::~private_copy() {
  if (base_ != nullptr) ::munmap(base_, mapped_);
}

bool private_copy::read(const std::string& path, bool no_follow, std::string* why,
                        const page_check& check) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
                                          (no_follow ? O_NOFOLLOW : 0));
  if (fd < 0) {
    *why = errno == ELOOP && no_follow ? std::string("a symbolic link, not a trace")
                                       : std::strerror(errno);
    return false;
  }
  const bool ok = read_fd(fd, why, check);
  ::close(fd);
  return ok;
}

bool private_copy::read_fd(int fd, std::string* why, const page_check& check) {
  if (::fstat(fd, &st_) != 0) {
    *why = std::strerror(errno);
    return false;
  }
  if (!S_ISREG(st_.st_mode)) {
    *why = std::string(file_kind(st_.st_mode)) + ", not a trace";
    return false;
  }
  if (st_.st_size <= 0) {
    *why = "empty, not a trace";
    return false;
  }
  const auto size = static_cast<std::uint64_t>(st_.st_size);
  if (size > k_max_trace_bytes) {
    *why = std::to_string(size) + " bytes, larger than any trace gmem writes (" +
           std::to_string(k_max_trace_bytes >> 30) + " GiB)";
    return false;
  }
  // The first page alone, vetted before anything more is read: a file that is not a trace
  // (another magic: junk named like one) costs one page however large it is, and a trace whose
  // header contradicts its name or its size is refused without copying the rest.
  constexpr std::uint64_t k_page = 4096;
  char page[k_page] = {};
  const std::uint64_t first = std::min(size, k_page);
  copy_range(fd, page, 0, first);
  std::uint64_t want = first;
  const bool trace_like = first >= sizeof(layout::header::magic) + sizeof(std::uint64_t) * 2 &&
                          std::memcmp(page, layout::k_magic, sizeof layout::k_magic) == 0;
  if (trace_like) {
    if (check) {
      std::string bad = check({reinterpret_cast<const std::byte*>(page), first});
      if (!bad.empty()) {
        *why = std::move(bad);
        return false;
      }
    }
    std::uint64_t total = 0;
    std::memcpy(&total, page + offsetof(layout::header, total_bytes), sizeof total);
    // A writer makes the object larger before its header says so: a header naming more bytes
    // than the file holds (checked again after reading it, as the file may have grown since
    // the first fstat) was forged or damaged.
    struct stat now {};
    if (total > size &&
        (::fstat(fd, &now) != 0 || total > static_cast<std::uint64_t>(now.st_size) ||
         total > k_max_trace_bytes)) {
      *why = "the header says the trace is " + std::to_string(total) + " bytes, the object holds " +
             std::to_string(size) + ": not a trace gmem wrote (forged or damaged)";
      return false;
    }
    want = std::max(total, first);
  }
  // Only the bytes the trace uses, up to the total_bytes of the header copied with them (bytes
  // the writer added later are not read: the copy stays consistent with its own header).
  mapped_ = static_cast<std::size_t>(want) + 8;
  void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    *why = std::string("cannot allocate a copy: ") + std::strerror(errno);
    return false;
  }
  base_ = p;
  ::madvise(p, mapped_, MADV_HUGEPAGE); // fewer faults while copying big objects
  auto* out = static_cast<char*>(p);
  std::memcpy(out, page, first);
  copy_range(fd, out, first, want);
  size_ = static_cast<std::size_t>(want);
  return true;
}

void private_copy::copy_range(int fd, char* out, std::uint64_t from, std::uint64_t to) {
  auto at = static_cast<off_t>(from);
  const auto end = static_cast<off_t>(to);
  while (at < end) {
    off_t data = ::lseek(fd, at, SEEK_DATA);
    if (data < 0 && errno == ENXIO) break; // only a hole is left
    if (data < 0 || data < at) data = at;  // no SEEK_DATA here: copy everything
    if (data >= end) break;
    off_t hole = ::lseek(fd, data, SEEK_HOLE);
    // Always progress, even when the file changes between the two calls.
    if (hole <= data || hole > end) hole = end;
    for (off_t o = data; o < hole;) {
      const ssize_t n = ::pread(fd, out + o, static_cast<std::size_t>(hole - o), o);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return; // truncated while we read: the rest stays zero
      o += n;
    }
    at = hole;
  }
}

} // namespace gmem::trace
