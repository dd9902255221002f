#include "common/trusted_path.h"

#include <sys/stat.h>

#include "common/safe_file.h"

namespace gmem {
namespace {

std::string check_component(const std::string& path, uid_t uid, bool directory) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return path + " is missing";
  if (S_ISLNK(st.st_mode)) return path + " is a symbolic link";
  if (directory ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
    return path + (directory ? " is not a directory" : " is not a regular file");
  if (st.st_uid != 0 && st.st_uid != uid)
    return path + " is owned by another user (uid " + std::to_string(st.st_uid) + ")";
  const bool sticky_dir = directory && (st.st_mode & S_ISVTX) != 0;
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && !sticky_dir)
    return path + " is writable by others";
  return {};
}

} // namespace

std::string untrusted_path_problem(const std::string& path, uid_t uid, bool directory) {
  if (path.empty() || path[0] != '/') return "'" + path + "' is not an absolute path";
  if (has_dot_dot(path)) return path + " has a '..' component";
  // The root, every directory below it, then the path itself.
  if (std::string why = check_component("/", uid, true); !why.empty()) return why;
  for (std::size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    if (slash == path.size() - 1) break; // "dir/": the last component, below
    if (std::string why = check_component(path.substr(0, slash), uid, true); !why.empty())
      return why;
  }
  return path == "/" ? std::string() : check_component(path, uid, directory);
}

} // namespace gmem
