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

// Writes `data` to `path`, mode 0600. Without `replace`, an existing path (file, symlink,
// anything) is an error ("... exists; --force replaces it"); with it, the data goes to a
// temporary file that is renamed over the old one. False with `error` filled on failure.
bool write_file_safely(const std::string& path, std::string_view data, bool replace,
                       std::string* error);

} // namespace gmem
