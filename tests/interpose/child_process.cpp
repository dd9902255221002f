#include "tests/interpose/child_process.h"

#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdlib>
#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

namespace gmem::test {

std::string self_dir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return ".";
  std::string s(path, static_cast<std::size_t>(n));
  return s.substr(0, s.rfind('/'));
}

child_result run_child(const std::vector<std::string>& argv,
                       const std::vector<std::pair<std::string, std::string>>& env, int timeout_s) {
  child_result result;
  int fds[2];
  if (pipe(fds) != 0) return result;
  const pid_t pid = fork();
  if (pid < 0) return result;
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    for (const auto& [name, value] : env)
      setenv(name.c_str(), value.c_str(), 1);
    std::vector<char*> args;
    for (const std::string& a : argv)
      args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  const long deadline_ms = static_cast<long>(timeout_s) * 1000;
  long waited_ms = 0;
  char buf[4096];
  for (;;) {
    pollfd p{fds[0], POLLIN, 0};
    const int ready = poll(&p, 1, 100);
    if (ready > 0) {
      const ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n <= 0) break;
      result.output.append(buf, static_cast<std::size_t>(n));
    } else if (ready == 0) {
      waited_ms += 100;
      if (waited_ms > deadline_ms) {
        kill(pid, SIGKILL);
        result.output += "\n[run_child: killed after timeout]\n";
        break;
      }
    } else if (errno != EINTR) {
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

} // namespace gmem::test
