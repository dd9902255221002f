#include "common/safe_file.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace gmem {
namespace {

bool set_error(std::string* error, const std::string& path, const std::string& what, int err) {
  if (error) *error = path + ": " + what + ": " + std::strerror(err);
  return false;
}

bool write_all(int fd, std::string_view data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

} // namespace

int create_temp_beside(const std::string& path, std::string* tmp_path) {
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  // A dot name, so a half-written file does not look like the result.
  std::string name = dir + "." + base + ".XXXXXX";
  std::vector<char> buf(name.begin(), name.end());
  buf.push_back('\0');
  const int fd = ::mkostemp(buf.data(), O_CLOEXEC); // O_CREAT|O_EXCL, mode 0600
  if (fd < 0) return -1;
  *tmp_path = buf.data();
  return fd;
}

namespace {

// fsync()s and closes `fd`; on failure unlinks `tmp_path`.
bool finish_temp(int fd, const std::string& tmp_path, const std::string& path, std::string* error) {
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp_path.c_str());
    return set_error(error, path, "cannot write", err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_path.c_str());
    return set_error(error, path, "cannot write", err);
  }
  return true;
}

const char* kind_of(mode_t mode) {
  return S_ISLNK(mode)    ? "a symbolic link"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISSOCK(mode) ? "a socket"
                          : "a regular file";
}

} // namespace

bool commit_temp_over_own_file(int fd, const std::string& tmp_path, const std::string& path,
                               std::string* error) {
  if (!finish_temp(fd, tmp_path, path, error)) return false;
  auto refuse = [&](const std::string& why) {
    ::unlink(tmp_path.c_str());
    if (error) *error = path + ": " + why;
    return false;
  };
  for (int attempt = 0; attempt < 4; ++attempt) {
    // Nothing there: take the name only if it is still free when the rename happens.
    if (::renameat2(AT_FDCWD, tmp_path.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE) == 0)
      return true;
    const bool no_flags = errno == EINVAL || errno == ENOSYS; // a file system without them
    if (errno != EEXIST && !no_flags) {
      const int err = errno;
      ::unlink(tmp_path.c_str());
      return set_error(error, path, "cannot rename " + tmp_path + " to it", err);
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT && !no_flags) continue; // removed meanwhile: try to take it again
      if (errno != ENOENT) {
        const int err = errno;
        ::unlink(tmp_path.c_str());
        return set_error(error, path, "cannot inspect", err);
      }
    } else if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
      return refuse(std::string(kind_of(st.st_mode)) + " owned by uid " +
                    std::to_string(st.st_uid) +
                    " is there: not replaced (a save replaces only a regular file of yours)");
    }
    if (no_flags) { // checked just above; no atomic way to hold it to that here
      if (::rename(tmp_path.c_str(), path.c_str()) == 0) return true;
      const int err = errno;
      ::unlink(tmp_path.c_str());
      return set_error(error, path, "cannot rename " + tmp_path + " to it", err);
    }
    // Swap, then make sure what we swapped out is the file we checked; else swap it back.
    if (::renameat2(AT_FDCWD, tmp_path.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) != 0) {
      if (errno == ENOENT) continue;
      const int err = errno;
      ::unlink(tmp_path.c_str());
      return set_error(error, path, "cannot rename " + tmp_path + " to it", err);
    }
    struct stat old {};
    if (::lstat(tmp_path.c_str(), &old) == 0 && old.st_dev == st.st_dev &&
        old.st_ino == st.st_ino) {
      ::unlink(tmp_path.c_str());
      return true;
    }
    ::renameat2(AT_FDCWD, tmp_path.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE);
    return refuse("replaced by something else while saving: not replaced");
  }
  return refuse("keeps changing while saving: not replaced");
}

bool commit_temp(int fd, const std::string& tmp_path, const std::string& path, std::string* error) {
  if (!finish_temp(fd, tmp_path, path, error)) return false;
  if (::rename(tmp_path.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_path.c_str());
    return set_error(error, path, "cannot rename " + tmp_path + " to it", err);
  }
  return true;
}

bool write_file_safely(const std::string& path, std::string_view data, bool replace,
                       std::string* error) {
  if (path.empty()) {
    if (error) *error = "empty file name";
    return false;
  }
  if (!replace) {
    // O_EXCL: an existing name (a symlink included, dangling or not) is refused, not followed.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
      if (errno == EEXIST) {
        if (error) *error = path + ": exists; --force replaces it";
        return false;
      }
      return set_error(error, path, "cannot create", errno);
    }
    ::fchmod(fd, 0600); // whatever the umask
    if (!write_all(fd, data) || ::fsync(fd) != 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(path.c_str());
      return set_error(error, path, "cannot write", err);
    }
    if (::close(fd) != 0) {
      const int err = errno;
      ::unlink(path.c_str());
      return set_error(error, path, "cannot write", err);
    }
    return true;
  }
  std::string tmp;
  const int fd = create_temp_beside(path, &tmp);
  if (fd < 0) return set_error(error, path, "cannot create a temporary file beside it", errno);
  if (!write_all(fd, data)) {
    const int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return set_error(error, path, "cannot write", err);
  }
  return commit_temp(fd, tmp, path, error);
}

bool has_dot_dot(std::string_view path) {
  for (std::size_t at = 0; at <= path.size();) {
    std::size_t end = path.find('/', at);
    if (end == std::string_view::npos) end = path.size();
    if (path.substr(at, end - at) == "..") return true;
    at = end + 1;
  }
  return false;
}

namespace {

std::string not_regular(mode_t mode) {
  return S_ISFIFO(mode)   ? "a FIFO, not a regular file"
         : S_ISCHR(mode)  ? "a character device, not a regular file"
         : S_ISBLK(mode)  ? "a block device, not a regular file"
         : S_ISDIR(mode)  ? "a directory, not a regular file"
         : S_ISSOCK(mode) ? "a socket, not a regular file"
                          : "not a regular file";
}

} // namespace

int open_regular_file(const std::string& path, bool follow, std::string* why) {
  constexpr int k_flags = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  auto refuse = [&](const std::string& what, int err) {
    if (why) *why = what;
    errno = err;
    return -1;
  };
  std::string at = path;
  for (int hops = 0;; ++hops) {
    // First a handle that opens nothing (O_PATH): a device node's driver is never called
    // (opening /dev/watchdog, a tape or a terminal has effects), a FIFO never waited on.
    const int handle = ::open(at.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (handle < 0) return refuse(std::strerror(errno), errno);
    struct stat st {};
    if (::fstat(handle, &st) != 0) {
      const int err = errno;
      ::close(handle);
      return refuse(std::strerror(err), err);
    }
    if (S_ISLNK(st.st_mode)) {
      ::close(handle);
      if (!follow) return refuse("a symbolic link", ELOOP);
      if (hops >= 16) return refuse("too many symbolic links", ELOOP);
      char buf[4096];
      const ssize_t n = ::readlink(at.c_str(), buf, sizeof buf);
      if (n <= 0 || static_cast<std::size_t>(n) >= sizeof buf)
        return refuse("an unreadable symbolic link", ELOOP);
      const std::string target(buf, static_cast<std::size_t>(n));
      const auto slash = at.rfind('/');
      at = target[0] == '/'
               ? target
               : (slash == std::string::npos ? std::string() : at.substr(0, slash + 1)) + target;
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(handle);
      return refuse(not_regular(st.st_mode), EINVAL);
    }
    // The same inode, now for reading: through the handle where /proc is mounted, else by
    // name with O_NOFOLLOW and checked to be the inode seen above.
    int fd = ::open(("/proc/self/fd/" + std::to_string(handle)).c_str(),
                    O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) fd = ::open(at.c_str(), k_flags);
    ::close(handle);
    if (fd < 0) return refuse(std::strerror(errno), errno);
    struct stat now {};
    if (::fstat(fd, &now) != 0 || !S_ISREG(now.st_mode) || now.st_dev != st.st_dev ||
        now.st_ino != st.st_ino) {
      ::close(fd);
      return refuse("replaced while being opened", EINVAL);
    }
    return fd;
  }
}

} // namespace gmem
