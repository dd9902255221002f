// What `gmem run` puts into the program's environment: LD_PRELOAD with libgmem.so in front,
// and the GMEM_* variables its flags set (one flag per row of common/options.h's table).
#pragma once

#include <string>
#include <sys/types.h>
#include <utility>
#include <vector>

#include "common/framework_env.h"

namespace gmem::tools {

// libgmem.so for this gmem: $GMEM_LIB if set, else <dir of the gmem binary>/../lib/libgmem.so
// (the installed layout and the build tree), resolved (realpath). It must pass
// untrusted_path_problem() (common/trusted_path.h) for `uid`, the user the program runs as:
// owned by root or that user, like every directory above it, and writable by nobody else.
// Returns "" and fills `why` when there is none or it fails the check.
std::string find_libgmem(const std::string& self_exe, const char* gmem_lib_env, std::string* why,
                         uid_t uid);

// Why `lib` cannot go into LD_PRELOAD ("" when it can): the dynamic loader splits LD_PRELOAD
// at spaces and colons, so "/opt/gm space/lib/libgmem.so" would preload "/opt/gm" and
// "space/lib/libgmem.so", the latter relative to the program's working directory, where
// another user may have put a library of theirs.
std::string preload_problem(const std::string& lib);

// "--max-cached" for row field "max_cached".
std::string flag_name_of(const char* field);

// Checks `value` with the shim's own parser; returns the warning the shim would print, or "".
std::string check_option_value(const char* env_name, const std::string& value);

// What GMEM_FRAMEWORKS (common/framework_env.h) does to a run's environment: its mode is the
// last GMEM_FRAMEWORKS of `settings` (flags, --env), else the one in `env`, else observe; in
// pool mode each framework variable `env` lacks is set and each it has is kept (an explicit
// value always wins). Append plan.set to the settings and print plan.message.
gmem::framework_env_plan
framework_plan(const std::vector<std::string>& env,
               const std::vector<std::pair<std::string, std::string>>& settings);

// `env` with LD_PRELOAD=<lib>[:previous] and each setting applied (replacing earlier values).
std::vector<std::string>
child_environment(const std::vector<std::string>& env,
                  const std::vector<std::pair<std::string, std::string>>& settings,
                  const std::string& lib);

} // namespace gmem::tools
