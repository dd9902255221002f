#include "common/safe_file.h"

#include <cerrno>
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

bool commit_temp(int fd, const std::string& tmp_path, const std::string& path, std::string* error) {
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

} // namespace gmem
