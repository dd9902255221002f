// A private, page-aligned copy of a trace object or file: decoding it cannot be disturbed by
// anyone who truncates, regrows or rewrites the file meanwhile (a shared mapping would die with
// SIGBUS). Only the bytes a trace uses are copied, holes stay holes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <sys/stat.h>

namespace gmem::trace {

// The largest object or file a reader will copy. Holes (pages never written) are not copied,
// so the memory a reader uses is bounded by the bytes the file really holds.
inline constexpr std::uint64_t k_max_trace_bytes = std::uint64_t{64} << 30;

// A bounded read of a trace: the header, then the sections in `sections` (a bit per
// layout::section_id) in a fixed order (counters, strings, modules, samples, live tables,
// stacks, events) while `max_bytes` lasts; the rest is never read. A section that does not fit
// is cut where its kind allows and the copy's own header is rewritten to say so (the counters
// and the module map keep their first records, the intern tables their first levels and
// chunks), else left out whole (the live tables, the sample ring, the event lanes): the
// decoder never looks at bytes that were not read, and the memory and time a read costs are
// bounded by `max_bytes` whatever the object's owner wrote. max_bytes 0: the whole trace.
struct copy_limits {
  std::uint64_t max_bytes = 0;
  std::uint32_t sections = ~std::uint32_t{0};
};

class private_copy {
public:
  private_copy() = default;
  ~private_copy();
  private_copy(const private_copy&) = delete;
  private_copy& operator=(const private_copy&) = delete;

  // Vets a trace's first page (its header, `page`, at most 4096 bytes) before anything more is
  // copied: "" when the rest may be copied, else why not (e.g. the header names another pid
  // than the object's name).
  using page_check = std::function<std::string(std::span<const std::byte> page)>;

  // Opens `path` without blocking (a FIFO would hang a blocking open), regular files only,
  // and, with `no_follow`, never through a symlink. Fills `why` and returns false otherwise.
  // A file that starts like a trace is copied only after its first page passes `check` and
  // its header's total_bytes fits the file (a header claiming more than the file holds is
  // refused at once, never re-read); anything else costs one page.
  bool read(const std::string& path, bool no_follow, std::string* why, const page_check& check = {},
            const copy_limits& limits = {});

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(base_), size_}; }
  const struct stat& file_stat() const { return st_; }
  // Bytes really read from the file (holes and sections left out not counted).
  std::uint64_t copied_bytes() const { return copied_; }
  // Bounded reads: the sections wanted (in copy_limits::sections) but cut or left out.
  std::uint32_t cut_sections() const { return cut_; }

private:
  bool read_fd(int fd, std::string* why, const page_check& check, const copy_limits& limits);
  // Copies the data ranges of [from, to): untouched pages of the copy read as the zeros of a
  // hole, and a file truncated meanwhile leaves the rest zero. Returns the bytes read.
  static std::uint64_t copy_range(int fd, char* out, std::uint64_t from, std::uint64_t to);
  // The bounded read of the sections after the header (copy_limits).
  void copy_sections(int fd, char* out, std::uint64_t total, const copy_limits& limits);

  void* base_ = nullptr;
  std::size_t mapped_ = 0;
  std::size_t size_ = 0;
  std::uint64_t copied_ = 0;
  std::uint32_t cut_ = 0;
  struct stat st_ {};
};

} // namespace gmem::trace
