// Writing files on a shared host: nothing another user planted at or beside the path (a
// symlink, a file of theirs, a FIFO) can receive our bytes or make us overwrite one of our own
// files. Every file is created 0600 with O_EXCL, in the target's own directory.
#pragma once

#include <string>
#include <string_view>

namespace gmem {

// Creates a new, empty temporary file beside `path` (same directory, so rename() is atomic):
// mkstemp, mode 0600 whatever the umask, never through a symlink. Returns the descriptor and
// sets `*tmp_path`, or returns -1 with errno set.
int create_temp_beside(const std::string& path, std::string* tmp_path);

// fsync()s and closes `fd`, then renames `tmp_path` to `path` (replacing a file or symlink
// there, never following it). On failure unlinks `tmp_path`, fills `error` ("<path>: what:
// strerror") and returns false. Always closes `fd`.
bool commit_temp(int fd, const std::string& tmp_path, const std::string& path, std::string* error);

// Like commit_temp, but replaces only a regular file owned by the caller's euid, or takes the
// name when nothing is there (RENAME_NOREPLACE; an existing file is swapped with
// RENAME_EXCHANGE and swapped back unless it is the one checked). A symlink, FIFO, device
// node, directory or another user's file at `path` is left as it is: false, `error` says what
// is there. Used for saved traces (gmem save, GMEM_TRACE_SAVE), which may name shared paths.
bool commit_temp_over_own_file(int fd, const std::string& tmp_path, const std::string& path,
                               std::string* error);

// Writes `data` to `path`, mode 0600. Without `replace`, an existing path (file, symlink,
// anything) is an error ("... exists; --force replaces it"); with it, the data goes to a
// temporary file that is renamed over the old one. False with `error` filled on failure.
bool write_file_safely(const std::string& path, std::string_view data, bool replace,
                       std::string* error);

// Opens `path` read-only and returns the descriptor only if it is a regular file; -1
// otherwise, with `why` saying what is there ("a FIFO, not a regular file", "No such file or
// directory", ...) and errno set (ENOENT when missing). The file is first looked at through
// an O_PATH|O_NOFOLLOW handle, which opens nothing: a device node's driver is never called,
// a FIFO never waited on, a terminal never becomes our controlling terminal. A regular file
// is then opened through that handle (the same inode, O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC;
// without /proc, by name with O_NOFOLLOW as well and checked to be the same inode). With
// `follow`, symlinks at the last component are resolved here (at most 16, each target read
// with readlink and joined to the link's directory); without it a symlink is refused.
int open_regular_file(const std::string& path, bool follow, std::string* why);

// True when `path` has a ".." component ("/usr/../x", "a/..", ".."): such a path from a trace
// is never followed.
bool has_dot_dot(std::string_view path);

} // namespace gmem
