// Per-tensor observation with no variable to set: in a Python interpreter, the shim's
// constructor (it runs before Py_Initialize) puts gmem's bootstrap directory first on
// PYTHONPATH, so that Python imports gmem's sitecustomize (python/gmem_bootstrap/), which
// removes the directory again (sys.path and PYTHONPATH: children see the user's value), chains
// to the sitecustomize it shadowed, and watches for torch and cupy being imported
// (interpose/framework_observer.h). Not done when GMEM_FRAMEWORKS=off, in a process that is not
// a Python interpreter, or when the directory fails the checks below.
//
// The directory is <directory of libgmem.so>/gmem/bootstrap in every layout (build tree, GPU
// bundle, install tree, tarball, wheel). A directory on PYTHONPATH runs code in every Python
// the user starts, so it must not be writable by anyone else: the directory and its
// sitecustomize.py are owned by root or by the effective user, are not group- or
// world-writable, and are not symbolic links.
#pragma once

#include <string>
#include <sys/types.h>

namespace gmem::shim {

// "" when `dir` may go on PYTHONPATH for a process running as `euid`, else why not.
std::string check_bootstrap_dir(const std::string& dir, uid_t euid);
// PYTHONPATH with `dir` first; `old` nullptr = unset.
std::string prepend_pythonpath(const std::string& dir, const char* old);
// In the constructor: does the above when this process is a Python interpreter.
void install_python_bootstrap();

} // namespace gmem::shim
