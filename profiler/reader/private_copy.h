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
  bool read(const std::string& path, bool no_follow, std::string* why,
            const page_check& check = {});

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(base_), size_}; }
  const struct stat& file_stat() const { return st_; }

private:
  bool read_fd(int fd, std::string* why, const page_check& check);
  // Copies the data ranges of [from, to): untouched pages of the copy read as the zeros of a
  // hole, and a file truncated meanwhile leaves the rest zero.
  static void copy_range(int fd, char* out, std::uint64_t from, std::uint64_t to);

  void* base_ = nullptr;
  std::size_t mapped_ = 0;
  std::size_t size_ = 0;
  struct stat st_ {};
};

} // namespace gmem::trace
