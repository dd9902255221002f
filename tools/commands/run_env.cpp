#include "tools/commands/run_env.h"

#include <climits>
#include <cstdlib>
#include <unistd.h>

#include "common/options.h"
#include "common/trusted_path.h"

namespace gmem::tools {

std::string find_libgmem(const std::string& self_exe, const char* gmem_lib_env, std::string* why,
                         uid_t uid) {
  // The library runs as the program's user (root's too): only a file nobody else can change.
  auto trusted = [&](const std::string& path, const std::string& what) -> std::string {
    char resolved[PATH_MAX];
    if (realpath(path.c_str(), resolved) == nullptr || access(resolved, R_OK) != 0) {
      *why = what + " is not a readable file";
      return {};
    }
    if (const std::string problem = untrusted_path_problem(resolved, uid, false);
        !problem.empty()) {
      *why = what + " is not used: " + problem +
             "; the library runs as you, so it and every directory above it must be owned by "
             "root or you and writable by nobody else";
      return {};
    }
    return resolved; // absolute: LD_PRELOAD must not depend on the program's directory
  };
  if (gmem_lib_env != nullptr && gmem_lib_env[0] != '\0')
    return trusted(gmem_lib_env, std::string("GMEM_LIB=") + gmem_lib_env);
  // Where the installed layout and the build tree put it: PREFIX/bin/gmem, PREFIX/lib/libgmem.so.
  const auto slash = self_exe.rfind('/');
  if (slash == std::string::npos || self_exe[0] != '/') {
    *why = "cannot tell where gmem runs from (" + self_exe + "); set GMEM_LIB=/path/to/libgmem.so";
    return {};
  }
  const std::string lib = self_exe.substr(0, slash) + "/../lib/libgmem.so";
  if (access(lib.c_str(), F_OK) != 0) {
    *why = "no libgmem.so next to gmem (looked for " + lib + "); set GMEM_LIB=/path/to/libgmem.so";
    return {};
  }
  return trusted(lib, lib);
}

std::string preload_problem(const std::string& lib) {
  if (lib.empty()) return "an empty path";
  if (lib.find_first_of(" :\t\n") != std::string::npos)
    return lib + " contains a space or a colon, where the dynamic loader splits LD_PRELOAD (it "
                 "would load other files, maybe another user's, instead); install gmem under a "
                 "path without them, or set GMEM_LIB to a path of libgmem.so without them";
  if (lib[0] != '/')
    return lib + " is not an absolute path (the loader would look for it relative to the "
                 "program's directory or search path); set GMEM_LIB to an absolute path";
  return {};
}

std::string flag_name_of(const char* field) {
  std::string f = "--";
  for (const char* c = field; *c != '\0'; ++c)
    f += *c == '_' ? '-' : *c;
  return f;
}

std::string check_option_value(const char* env_name, const std::string& value) {
  std::string warning;
  gmem::options::parse(
      [&](const char* name) { return std::string(name) == env_name ? value.c_str() : nullptr; },
      [&](const std::string& w) { warning = w; });
  return warning;
}

gmem::framework_env_plan
framework_plan(const std::vector<std::string>& env,
               const std::vector<std::pair<std::string, std::string>>& settings) {
  auto from_env = [&](const std::string& name) -> const char* {
    for (const auto& e : env)
      if (e.size() > name.size() && e.compare(0, name.size(), name) == 0 && e[name.size()] == '=')
        return e.c_str() + name.size() + 1;
    return nullptr;
  };
  std::string mode_text = "observe";
  if (const char* v = from_env("GMEM_FRAMEWORKS")) mode_text = v;
  for (const auto& [name, value] : settings)
    if (name == "GMEM_FRAMEWORKS") mode_text = value;
  gmem::frameworks_mode mode = gmem::frameworks_mode::observe;
  (void)gmem::parse_frameworks_mode(mode_text, mode); // checked with the other settings
  return gmem::plan_framework_env(mode, [&](const char* name) { return from_env(name); });
}

std::vector<std::string>
child_environment(const std::vector<std::string>& env,
                  const std::vector<std::pair<std::string, std::string>>& settings,
                  const std::string& lib) {
  std::vector<std::string> out;
  std::string preload = lib;
  for (const auto& e : env) {
    if (e.rfind("LD_PRELOAD=", 0) == 0) {
      const std::string old = e.substr(11);
      // Keep what was preloaded before, minus another copy of ours.
      std::string rest;
      std::size_t at = 0;
      while (at <= old.size()) {
        std::size_t end = old.find_first_of(": ", at);
        if (end == std::string::npos) end = old.size();
        const std::string item = old.substr(at, end - at);
        if (!item.empty() && item != lib) rest += ":" + item;
        at = end + 1;
      }
      preload += rest;
      continue;
    }
    bool replaced = false;
    for (const auto& [name, value] : settings)
      if (e.rfind(name + "=", 0) == 0) replaced = true;
    if (!replaced) out.push_back(e);
  }
  out.push_back("LD_PRELOAD=" + preload);
  for (const auto& [name, value] : settings)
    out.push_back(name + "=" + value);
  return out;
}

} // namespace gmem::tools
