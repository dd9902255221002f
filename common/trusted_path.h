// Files whose contents run as the caller (a library to preload, a directory put on PYTHONPATH):
// trusted only where nobody but root and the caller can change what the path names.
#pragma once

#include <string>
#include <sys/types.h>

namespace gmem {

// "" when `path` (absolute) and every directory above it, up to "/", are owned by root or
// `uid`, are not symbolic links, and are writable by nobody else: no group or other write
// bit, except on a sticky directory (/tmp), where others may add entries but not rename or
// remove ours, and the next component is checked in turn. `directory` says what the last
// component must be (a directory, else a regular file). Otherwise why not, naming the
// component ("/tmp/lib is owned by uid 1001"). The path is taken as written: resolve symbolic
// links first (realpath) when they are allowed, and use the resolved path.
std::string untrusted_path_problem(const std::string& path, uid_t uid, bool directory);

} // namespace gmem
