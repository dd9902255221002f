// Runs a program with extra environment variables and collects its exit status and output
// (stdout and stderr together), for tests that must observe a process from outside: the shim
// only works when preloaded, and exit/fork behaviour can only be seen from a parent.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gmem::test {

struct child_result {
  int exit_code = -1; // -1: killed by a signal (see signal) or could not start
  int signal = 0;
  std::string output;
};

// Runs argv[0] (a path) with the parent's environment plus `env` (NAME, value), killing it
// after `timeout_s` seconds.
child_result run_child(const std::vector<std::string>& argv,
                       const std::vector<std::pair<std::string, std::string>>& env,
                       int timeout_s = 60);

// The directory of the running executable.
std::string self_dir();

} // namespace gmem::test
