#include "profiler/reader/private_copy.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <iterator>
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
                        const page_check& check, const copy_limits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
                                          (no_follow ? O_NOFOLLOW : 0));
  if (fd < 0) {
    *why = errno == ELOOP && no_follow ? std::string("a symbolic link, not a trace")
                                       : std::strerror(errno);
    return false;
  }
  const bool ok = read_fd(fd, why, check, limits);
  ::close(fd);
  return ok;
}

bool private_copy::read_fd(int fd, std::string* why, const page_check& check,
                           const copy_limits& limits) {
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
  auto* out = static_cast<char*>(p);
  std::memcpy(out, page, first);
  copied_ = first;
  size_ = static_cast<std::size_t>(want);
  if (limits.max_bytes != 0 && trace_like && want > layout::k_header_bytes) {
    // No huge pages here: each small range copied would fault in 2 MiB. Pages never written
    // are never read either (copy_sections cuts the header to what it copied).
    copied_ += copy_range(fd, out, first, layout::k_header_bytes);
    copy_sections(fd, out, want, limits);
    return true;
  }
  ::madvise(p, mapped_, MADV_HUGEPAGE); // fewer faults while copying big objects
  copied_ += copy_range(fd, out, first, want);
  return true;
}

void private_copy::copy_sections(int fd, char* out, std::uint64_t total,
                                 const copy_limits& limits) {
  namespace l = layout;
  auto* h = reinterpret_cast<l::header*>(out);
  std::uint64_t left =
      limits.max_bytes > l::k_header_bytes ? limits.max_bytes - l::k_header_bytes : 0;
  // Bytes of an extent of records of `record_bytes` that lies inside the trace; false for one
  // that does not (never read here: the decoder refuses it, or counts it torn).
  auto inside = [&](const l::extent& e, std::uint64_t record_bytes, std::uint64_t* bytes) {
    if (e.offset < l::k_header_bytes || e.offset > total || record_bytes == 0 ||
        e.capacity > (total - e.offset) / record_bytes)
      return false;
    *bytes = e.capacity * record_bytes;
    return true;
  };
  auto copy = [&](std::uint64_t from, std::uint64_t bytes) {
    copied_ += copy_range(fd, out, from, from + bytes);
    left -= bytes;
  };
  constexpr l::section_id k_order[] = {
      l::k_counters, l::k_string_slots, l::k_string_bytes, l::k_modules,   l::k_samples,
      l::k_live,     l::k_segments,     l::k_stack_slots,  l::k_stack_ips, l::k_events};
  static_assert(std::size(k_order) == l::k_section_count);
  for (const l::section_id i : k_order) {
    l::section& s = h->sections[i];
    l::extent* dir = h->extents[i];
    const bool wanted = ((limits.sections >> i) & 1) != 0;
    const std::uint32_t n = std::min(s.extent_count, l::k_max_extents);
    const l::section_kind kind =
        i == l::k_events && h->format_version < 4 ? l::section_kind::ring : l::kind_of(i);
    if (kind == l::section_kind::lanes || kind == l::section_kind::ring ||
        kind == l::section_kind::shards) {
      // Decoded only when asked for: all of it, or none (cut_ says so).
      if (!wanted) continue;
      std::uint64_t need = 0, bytes = 0;
      bool fits = true;
      if (kind == l::section_kind::lanes) {
        constexpr std::uint64_t k_lane_bytes = l::lane_word::count * 8;
        constexpr std::uint64_t k_event_bytes = l::event_word::count * 8;
        const l::extent table = dir[0];
        fits = n == 1 && table.capacity <= l::lane_word::k_max_lanes &&
               inside(table, k_lane_bytes, &bytes) && bytes <= left;
        const bool table_copied = fits;
        if (fits) copy(table.offset, bytes);
        // Every chunk of every lane (their directories are in the lane table just copied).
        auto each_chunk = [&](const auto& fn) {
          for (std::uint64_t lane = 0; lane < table.capacity; ++lane)
            for (std::uint32_t k = 0; k < l::k_max_extents; ++k) {
              l::extent e{};
              std::memcpy(&e,
                          out + table.offset + lane * k_lane_bytes + 8 * l::lane_word::dir +
                              k * sizeof e,
                          sizeof e);
              std::uint64_t chunk = 0;
              if (e.offset != 0 && inside(e, k_event_bytes, &chunk) && !fn(e.offset, chunk)) return;
            }
        };
        if (fits)
          each_chunk([&](std::uint64_t, std::uint64_t chunk) {
            fits = chunk <= left - need;
            need += fits ? chunk : 0;
            return fits;
          });
        if (fits)
          each_chunk([&](std::uint64_t at, std::uint64_t chunk) {
            copy(at, chunk);
            return true;
          });
        else if (table_copied)
          std::memset(out + table.offset, 0, table.capacity * k_lane_bytes); // no lanes at all
      } else {
        for (std::uint32_t k = 0; k < n && fits; ++k)
          if (dir[k].offset != 0 && inside(dir[k], s.record_bytes, &bytes)) {
            fits = bytes <= left - need;
            need += fits ? bytes : 0;
          }
        if (fits)
          for (std::uint32_t k = 0; k < n; ++k)
            if (dir[k].offset != 0 && inside(dir[k], s.record_bytes, &bytes))
              copy(dir[k].offset, bytes);
      }
      if (!fits) cut_ |= 1u << i;
      continue;
    }
    // The counters, the module map and the intern tables: always decoded, so cut to what fits
    // (nothing when not wanted) in the copy's header.
    const std::uint64_t avail = wanted ? left : 0;
    std::uint64_t bytes = 0;
    if (kind == l::section_kind::fixed) {
      if (n != 1 || !inside(dir[0], s.record_bytes, &bytes)) continue; // the decoder refuses it
      if (bytes <= avail) {
        copy(dir[0].offset, bytes);
        continue;
      }
      const std::uint64_t fit = avail / s.record_bytes;
      s.capacity = dir[0].capacity = std::max<std::uint64_t>(fit, 1); // a zero record: unused
      if (fit != 0) copy(dir[0].offset, fit * s.record_bytes);
    } else { // levels, arena: the first extents that fit (later levels' ids follow them)
      std::uint32_t kept = 0;
      std::uint64_t used = 0;
      for (; kept < n; ++kept) {
        if (!inside(dir[kept], s.record_bytes, &bytes) || bytes > avail - used) break;
        used += bytes;
      }
      for (std::uint32_t k = 0; k < kept; ++k)
        copy(dir[k].offset, dir[k].capacity * s.record_bytes);
      if (kept == n) continue;
      if (kept == 0) { // one empty record: the section's shape stays valid
        dir[0].capacity = 1;
        kept = 1;
      }
      s.extent_count = kept;
    }
    if (wanted) cut_ |= 1u << i;
  }
}

std::uint64_t private_copy::copy_range(int fd, char* out, std::uint64_t from, std::uint64_t to) {
  std::uint64_t copied = 0;
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
      if (n <= 0) return copied; // truncated while we read: the rest stays zero
      o += n;
      copied += static_cast<std::uint64_t>(n);
    }
    at = hole;
  }
  return copied;
}

} // namespace gmem::trace
