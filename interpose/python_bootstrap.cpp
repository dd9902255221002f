#include "interpose/python_bootstrap.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/framework_env.h"
#include "common/trusted_path.h"
#include "interpose/real_driver.h"
#include "interpose/shim_state.h"

namespace gmem::shim {
namespace {

// The directory libgmem.so was loaded from.
std::string library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<const void*>(&install_python_bootstrap), &info) == 0 ||
      info.dli_fname == nullptr)
    return {};
  char resolved[4096];
  if (realpath(info.dli_fname, resolved) == nullptr) return {};
  std::string path = resolved;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

bool is_python_interpreter() {
  const dlsym_fn sym = real_dlsym();
  return sym != nullptr && (sym(RTLD_DEFAULT, "Py_BytesMain") != nullptr ||
                            sym(RTLD_DEFAULT, "Py_InitializeFromConfig") != nullptr);
}

} // namespace

std::string check_bootstrap_dir(const std::string& dir, uid_t euid) {
  if (dir.empty() || dir[0] != '/') return "no absolute directory";
  if (dir.find(':') != std::string::npos) return dir + " contains a colon (PYTHONPATH's separator)";
  // The directory, its file and every directory above them (common/trusted_path.h).
  return untrusted_path_problem(dir + "/sitecustomize.py", euid, false);
}

std::string prepend_pythonpath(const std::string& dir, const char* old) {
  if (old == nullptr || old[0] == '\0') return dir;
  return dir + ":" + old;
}

void install_python_bootstrap() {
  frameworks_mode mode = frameworks_mode::observe;
  (void)parse_frameworks_mode(shim_options().frameworks, mode); // checked when read
  if (mode == frameworks_mode::off || !is_python_interpreter()) return;
  const std::string lib = library_dir();
  const std::string dir = lib.empty() ? std::string() : lib + "/gmem/bootstrap";
  if (const std::string why = check_bootstrap_dir(dir, geteuid()); !why.empty()) {
    std::fprintf(stderr,
                 "gmem: warning: Python bootstrap not used (%s); PyTorch's tensors and CuPy's "
                 "arrays are seen only as their caches' segments\n",
                 why.c_str());
    return;
  }
  setenv("PYTHONPATH", prepend_pythonpath(dir, std::getenv("PYTHONPATH")).c_str(), 1);
}

} // namespace gmem::shim
