#include "tools/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "common/safe_file.h"

namespace gmem::tools {
namespace {

constexpr std::string_view k_debug_dir = "/usr/lib/debug";
constexpr std::uint32_t k_max_string = 64 * 1024; // longer names are cut
constexpr gid_t k_nobody_group = 65534;           // nogroup

// Why a module's file is not used, decided from its path alone (no file is opened).
std::string path_note(const std::string& path) {
  if (has_dot_dot(path)) return "path has a '..' component: not followed, not symbolized";
  return {};
}

// --- the child: elfutils over descriptors gmem opened -------------------------------------

// The module's file. Symlinks in module paths are normal (libcuda.so.1 -> libcuda.so.580.x):
// open_regular_file follows them itself and opens the end of the chain O_NOFOLLOW.
int open_module(const std::string& path, std::string* note) {
  std::string why;
  const int fd = open_regular_file(path, true, &why);
  if (fd < 0 && errno != ENOENT) // a module of another host is the usual case: no note for it
    *note = "cannot open: " + why + ": not symbolized";
  return fd;
}

// elfutils' find_elf: every module is reported with a descriptor, so there is nothing to find.
int refuse_find_elf(Dwfl_Module*, void**, const char*, Dwarf_Addr, char** file_name, Elf**) {
  *file_name = nullptr;
  return -1;
}

// /usr/lib/debug/.build-id/xx/yyyy.debug for a build id of `n` bytes; -1 when there is none.
int open_by_build_id(const unsigned char* bits, long n) {
  if (bits == nullptr || n < 2 || n > 64) return -1;
  std::string path = std::string(k_debug_dir) + "/.build-id/";
  char b[3];
  for (long i = 0; i < n; ++i) {
    std::snprintf(b, sizeof b, "%02x", bits[i]);
    path += b;
    if (i == 0) path += '/';
  }
  return open_regular_file(path + ".debug", true, nullptr);
}

// elfutils' find_debuginfo: separate debug info from /usr/lib/debug only, opened by us. The
// name is never handed back (libdwfl would open it itself when the descriptor is -1).
int find_debuginfo_safely(Dwfl_Module* mod, void**, const char* modname, Dwarf_Addr,
                          const char* /*file_name*/, const char* debuglink, GElf_Word crc,
                          char** debuginfo_file_name) {
  *debuginfo_file_name = nullptr;
  if (debuglink != nullptr && crc == 0) {
    // The dwz alternate file (.gnu_debugaltlink): only an absolute name under /usr/lib/debug.
    const std::string alt = debuglink;
    if (alt.rfind(std::string(k_debug_dir) + "/", 0) != 0 || has_dot_dot(alt)) return -1;
    return open_regular_file(alt, true, nullptr);
  }
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  const int n = dwfl_module_build_id(mod, &bits, &vaddr);
  if (const int fd = open_by_build_id(bits, n); fd >= 0) return fd;
  // .gnu_debuglink: a base name, looked up under /usr/lib/debug/<module's directory>. The
  // module path has no ".." (checked before it was reported), so this stays under it.
  if (debuglink == nullptr || modname == nullptr) return -1;
  const std::string link = debuglink, module = modname;
  if (link.empty() || link.find('/') != std::string::npos || link == "." || link == "..") return -1;
  const auto slash = module.rfind('/');
  if (slash == std::string::npos || has_dot_dot(module)) return -1;
  return open_regular_file(std::string(k_debug_dir) + module.substr(0, slash + 1) + link, true,
                           nullptr);
}

// A dwz alternate file (.gnu_debugaltlink) holds strings and DIEs that a module's DWARF
// refers to. Unless it was handed one, libdw opens it by name itself the first time it reads
// such an attribute (a line lookup reads the unit's directory): the build-id path, then the
// recorded name beside the debug file, blocking and following links, so a FIFO there stalls
// the lookup until the budget runs out. So before a module's lines are looked up, libdw gets
// the alternate file from us, opened like every other file (by build id under
// /usr/lib/debug, or an absolute name there); when there is none, the module's lines are not
// looked up. Its function names need no DWARF (the symbol table). `known` caches the answer.
bool lines_usable(Dwfl_Module* mod, std::map<Dwfl_Module*, bool>& known) {
  auto [it, fresh] = known.try_emplace(mod, true);
  if (!fresh) return it->second;
  Dwarf_Addr bias = 0;
  Dwarf* dw = dwfl_module_getdwarf(mod, &bias);
  if (dw == nullptr) return true; // no DWARF: a line lookup reads nothing
  const char* name = nullptr;
  const void* id = nullptr;
  const ssize_t n = dwelf_dwarf_gnu_debugaltlink(dw, &name, &id);
  if (n <= 0) return true; // no alternate file named
  int fd = open_by_build_id(static_cast<const unsigned char*>(id), n);
  if (fd < 0 && name != nullptr) {
    const std::string alt = name;
    if (alt.rfind(std::string(k_debug_dir) + "/", 0) == 0 && !has_dot_dot(alt))
      fd = open_regular_file(alt, true, nullptr);
  }
  Dwarf* alt = fd >= 0 ? dwarf_begin(fd, DWARF_C_READ) : nullptr;
  if (alt == nullptr) {
    if (fd >= 0) ::close(fd);
    return it->second = false;
  }
  dwarf_setalt(dw, alt); // both live as long as the child
  return true;
}

bool write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

void put_u32(std::string* out, std::uint32_t v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof v);
}

void put_string(std::string* out, std::string_view s) {
  s = s.substr(0, k_max_string);
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out->append(s);
}

bool read_all_blocking(int fd, void* buf, std::size_t n) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    const ssize_t got = ::read(fd, p, n);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    n -= static_cast<std::size_t>(got);
  }
  return true;
}

// Who the child becomes when the reader is root.
struct identity {
  uid_t uid = 0;
  gid_t gid = 0;
};

// The bytes mapped now (VmSize), from /proc/self/statm; 0 when unknown.
std::uint64_t mapped_bytes() {
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[64] = {};
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  return n > 0 ? std::strtoull(buf, nullptr, 10) * static_cast<std::uint64_t>(::getpagesize()) : 0;
}

// Closes every descriptor in [from, to] (close_range, or one by one on kernels before 5.9).
void close_from(unsigned from, unsigned to) {
  if (from > to || ::syscall(SYS_close_range, from, to, 0u) == 0) return;
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const auto most = static_cast<unsigned>(std::min<rlim_t>(files.rlim_cur, 1u << 20));
  for (unsigned fd = from; fd <= to && fd < most; ++fd)
    ::close(static_cast<int>(fd));
}

// Before the child opens anything: only the socket stays open (and /dev/null as stdin, stdout
// and stderr), no new privileges, not dumpable (the owner it becomes can neither ptrace it nor
// read its memory, a copy of the reader's), and a root reader becomes `who`. The address-space
// limit follows once the modules are open (limit_address_space). Returns the socket's
// descriptor, or -1 when a step failed (the child then serves nothing).
int confine(int sock, const identity& who, pid_t parent) {
  if (sock < 3 && (sock = ::fcntl(sock, F_DUPFD, 3)) < 0) return -1;
  const int null = ::open("/dev/null", O_RDWR);
  if (null < 0) return -1;
  for (int fd = 0; fd < 3; ++fd)
    if (fd != null && ::dup2(null, fd) < 0) return -1;
  close_from(3, static_cast<unsigned>(sock) - 1);
  close_from(static_cast<unsigned>(sock) + 1, ~0u);
  if (::geteuid() == 0 && who.uid != 0 &&
      (::setgroups(0, nullptr) != 0 || ::setresgid(who.gid, who.gid, who.gid) != 0 ||
       ::setresuid(who.uid, who.uid, who.uid) != 0))
    return -1;
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_DUMPABLE, 0) != 0) return -1;
  // After the credentials changed (which clears it): never outlive the thread that forked us,
  // even stuck in an open. That thread may have ended already.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  return ::getppid() == parent ? sock : -1;
}

// The bytes a module's file really holds: its size, but no more than its allocated blocks (a
// sparse file earns nothing).
std::uint64_t file_bytes(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0) return 0;
  return std::min(static_cast<std::uint64_t>(st.st_size),
                  static_cast<std::uint64_t>(st.st_blocks) * 512u);
}

// The address space may grow by k_helper_memory for elfutils' own allocations, plus what the
// open module files hold (at most k_module_maps): libdwfl maps each module whole, private and
// writable, so a library of PyTorch's size (libtorch_cuda.so, cuBLAS) must fit in the limit or
// its mapping fails and elfutils falls back to reading it into memory. Never above the limit the
// child inherited. False when the limit cannot be set (the child then serves nothing).
bool limit_address_space(std::uint64_t module_bytes) {
  const std::uint64_t now = mapped_bytes();
  if (now == 0) return true; // no /proc/self/statm: nothing to count from
  std::uint64_t most =
      now + symbolizer::k_helper_memory + std::min(module_bytes, symbolizer::k_module_maps);
  rlimit inherited{};
  if (::getrlimit(RLIMIT_AS, &inherited) == 0 && inherited.rlim_max != RLIM_INFINITY)
    most = std::min<std::uint64_t>(most, inherited.rlim_max);
  const rlimit as{most, most};
  return ::setrlimit(RLIMIT_AS, &as) == 0;
}

// The child's whole life: open every usable module (with the owner's rights: confine() ran),
// limit the address space, report the modules to elfutils, send each module's verdict (stale,
// note), then answer one ip at a time until the parent closes the socket.
[[noreturn]] void serve(int sock, const std::vector<module_range>& modules) {
  ::signal(SIGINT, SIG_IGN);     // the reader decides when we stop
  ::unsetenv("DEBUGINFOD_URLS"); // no network lookups, whatever libdw links
  std::vector<int> fds(modules.size(), -1);
  std::vector<std::string> notes(modules.size());
  std::uint64_t module_bytes = 0;
  for (std::size_t i = 0; i < modules.size(); ++i) {
    const auto& m = modules[i];
    notes[i] = path_note(m.path);
    if (!notes[i].empty() || m.path.empty() || m.path[0] != '/') continue;
    fds[i] = open_module(m.path, &notes[i]);
    if (fds[i] >= 0 && m.build_id.empty()) {
      ::close(fds[i]);
      fds[i] = -1;
      notes[i] = "no build id recorded: not symbolized";
    } else if (fds[i] >= 0) {
      module_bytes += file_bytes(fds[i]);
    }
  }
  if (!limit_address_space(module_bytes)) ::_exit(1);
  static Dwfl_Callbacks callbacks{};
  callbacks.find_elf = refuse_find_elf;
  callbacks.find_debuginfo = find_debuginfo_safely;
  callbacks.section_address = dwfl_offline_section_address;
  callbacks.debuginfo_path = nullptr;
  Dwfl* dwfl = dwfl_begin(&callbacks);
  std::string verdicts;
  if (dwfl != nullptr) dwfl_report_begin(dwfl);
  for (std::size_t i = 0; i < modules.size(); ++i) {
    const auto& m = modules[i];
    std::string note = std::move(notes[i]);
    bool stale = false;
    if (const int fd = fds[i]; fd >= 0 && dwfl == nullptr) {
      ::close(fd);
    } else if (fd >= 0) {
      Dwfl_Module* mod = dwfl_report_elf(dwfl, m.path.c_str(), m.path.c_str(), fd, m.base,
                                         false); // consumes fd on success
      if (mod == nullptr) {
        ::close(fd);
        note = "not an ELF file: not symbolized";
      } else {
        const unsigned char* bits = nullptr;
        GElf_Addr vaddr = 0;
        const int n = dwfl_module_build_id(mod, &bits, &vaddr);
        std::string hex;
        for (int b = 0; b < n; ++b) {
          char hexb[3];
          std::snprintf(hexb, sizeof hexb, "%02x", bits[b]);
          hex += hexb;
        }
        if (hex != m.build_id) {
          stale = true;
          note = "rebuilt since the run: not symbolized";
        }
      }
    }
    verdicts += static_cast<char>(stale);
    put_string(&verdicts, note);
  }
  if (dwfl != nullptr) dwfl_report_end(dwfl, nullptr, nullptr);
  if (!write_all(sock, verdicts)) ::_exit(0);
  std::map<Dwfl_Module*, bool> lines_known;
  std::uint64_t ip = 0;
  while (read_all_blocking(sock, &ip, sizeof ip)) {
    std::string function, file;
    int lineno = 0;
    const Dwarf_Addr pc = ip > 0 ? ip - 1 : ip;
    if (Dwfl_Module* mod = dwfl != nullptr ? dwfl_addrmodule(dwfl, pc) : nullptr) {
      GElf_Off offset = 0;
      GElf_Sym sym;
      function = demangle(dwfl_module_addrinfo(mod, pc, &offset, &sym, nullptr, nullptr, nullptr));
      if (Dwfl_Line* line = lines_usable(mod, lines_known) ? dwfl_module_getsrc(mod, pc) : nullptr;
          line != nullptr)
        if (const char* f = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr))
          file = f;
    }
    std::string reply;
    put_string(&reply, function);
    put_string(&reply, file);
    put_u32(&reply, static_cast<std::uint32_t>(lineno));
    if (!write_all(sock, reply)) break;
  }
  ::_exit(0);
}

} // namespace

// The parent's end of the child: its pid, the socket and the deadline for everything it does.
struct symbolizer::helper {
  pid_t pid = -1;
  int sock = -1;
  std::chrono::steady_clock::time_point deadline;

  // Reads exactly `n` bytes before the deadline. False on timeout, EOF or error.
  bool read_exact(void* buf, std::size_t n, bool* timed_out) {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) {
        *timed_out = true;
        return false;
      }
      pollfd pfd{sock, POLLIN, 0};
      const int r = ::poll(&pfd, 1, static_cast<int>(std::min<long long>(left.count(), 1 << 30)));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) return false;
      if (r == 0) continue; // the loop sees the deadline
      const ssize_t got = ::recv(sock, p, n, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return false;
      p += got;
      n -= static_cast<std::size_t>(got);
    }
    return true;
  }
  bool read_string(std::string* s, bool* timed_out) {
    std::uint32_t n = 0;
    if (!read_exact(&n, sizeof n, timed_out) || n > k_max_string) return false;
    s->resize(n);
    return n == 0 || read_exact(s->data(), n, timed_out);
  }
  ~helper() {
    if (sock >= 0) ::close(sock);
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
  }
};

std::string demangle(const char* symbol) {
  if (symbol == nullptr) return {};
  int status = 0;
  char* d = abi::__cxa_demangle(symbol, nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return symbol;
  std::string out(d);
  std::free(d);
  return out;
}

std::string frame_info::location() const {
  if (file.empty()) return {};
  const auto slash = file.rfind('/');
  return (slash == std::string::npos ? file : file.substr(slash + 1)) + ":" + std::to_string(line);
}

std::string frame_info::name() const {
  if (!via.empty()) return (function.empty() ? std::string("?") : function) + " [via " + via + "]";
  if (!function.empty()) return function;
  const auto slash = module.rfind('/');
  char off[32];
  std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(module_offset));
  return (slash == std::string::npos ? module : module.substr(slash + 1)) + off;
}

symbolizer::symbolizer(std::vector<module_range> modules, std::chrono::milliseconds budget)
    : modules_(std::move(modules)), budget_(budget) {
  std::sort(modules_.begin(), modules_.end(),
            [](const module_range& a, const module_range& b) { return a.start < b.start; });
  for (auto& m : modules_)
    m.note = path_note(m.path);
}

symbolizer::~symbolizer() = default;

void symbolizer::stop_helper(const std::string& why) {
  helper_.reset(); // kills and reaps the child
  helper_note_ = why;
}

bool symbolizer::start_helper() {
  if (helper_started_) return helper_ != nullptr;
  helper_started_ = true;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    helper_note_ = std::string("not symbolized: socketpair: ") + std::strerror(errno);
    return false;
  }
  // The owner's primary group, looked up here: NSS is no place for a forked child.
  identity who{run_as_ == k_reader ? ::geteuid() : run_as_, k_nobody_group};
  if (who.uid != symbolizer::k_nobody) {
    std::vector<char> buf(16384);
    passwd pw{};
    passwd* found = nullptr;
    if (::getpwuid_r(run_as_, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr)
      who.gid = found->pw_gid;
  }
  const pid_t parent = ::getpid();
  std::fflush(nullptr); // the child never writes to stdio, but must not inherit unflushed data
  const pid_t pid = ::fork();
  if (pid < 0) {
    helper_note_ = std::string("not symbolized: fork: ") + std::strerror(errno);
    ::close(sv[0]);
    ::close(sv[1]);
    return false;
  }
  if (pid == 0) { // never returns into the reader's code, not even by an exception
    ::close(sv[0]);
    const int sock = confine(sv[1], who, parent);
    if (sock < 0) ::_exit(1);
    try {
      serve(sock, modules_);
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(sv[1]);
  helper_ = std::make_unique<helper>();
  helper_->pid = pid;
  helper_->sock = sv[0];
  const auto started = std::chrono::steady_clock::now();
  helper_->deadline = started + budget_;
  for (auto& m : modules_) {
    char stale = 0;
    bool timed_out = false;
    std::string note;
    if (!helper_->read_exact(&stale, 1, &timed_out) || !helper_->read_string(&note, &timed_out)) {
      stop_helper(timed_out ? "not symbolized: the symbolization budget of " +
                                  std::to_string(budget_.count()) +
                                  " ms for this trace ran out while opening its modules"
                            : "not symbolized: the symbolizer process failed");
      return false;
    }
    m.stale = stale != 0;
    if (!note.empty()) m.note = note;
  }
  spent_ += std::chrono::steady_clock::now() - started;
  return true;
}

int symbolizer::helper_pid() const {
  return helper_ != nullptr ? helper_->pid : -1;
}

const module_range* symbolizer::find_module(std::uint64_t ip) const {
  auto it = std::upper_bound(modules_.begin(), modules_.end(), ip,
                             [](std::uint64_t a, const module_range& m) { return a < m.start; });
  while (it != modules_.begin()) {
    --it;
    if (ip >= it->start && ip - it->start < it->size) return &*it;
    if (ip >= it->start) break;
  }
  return nullptr;
}

const frame_info& symbolizer::resolve(std::uint64_t ip) {
  auto [it, inserted] = cache_.try_emplace(ip);
  frame_info& f = it->second;
  if (!inserted) return f;
  f.ip = ip;
  const module_range* m = find_module(ip);
  f.module = m != nullptr ? m->path : "?";
  f.module_offset = m != nullptr ? ip - m->start : ip;
  if (m == nullptr) return f;
  if (m->note.empty() && !m->path.empty() && m->path[0] == '/') start_helper();
  f.stale = m->stale;
  f.note = m->note;
  if (!f.note.empty() || m->path.empty() || m->path[0] != '/') return f;
  if (helper_ == nullptr) {
    f.note = helper_note_;
    return f;
  }
  bool timed_out = false;
  std::string function, file;
  std::uint32_t line = 0;
  // The budget counts the time spent waiting for the child, not the symbolizer's age: the
  // exporter keeps one per process across scrapes.
  const auto started = std::chrono::steady_clock::now();
  helper_->deadline = started + (budget_ - spent_);
  if (!write_all(helper_->sock, std::string(reinterpret_cast<const char*>(&ip), sizeof ip)) ||
      !helper_->read_string(&function, &timed_out) || !helper_->read_string(&file, &timed_out) ||
      !helper_->read_exact(&line, sizeof line, &timed_out)) {
    stop_helper(timed_out ? "not symbolized: the symbolization budget of " +
                                std::to_string(budget_.count()) + " ms for this trace ran out"
                          : "not symbolized: the symbolizer process failed");
    f.note = helper_note_;
    return f;
  }
  spent_ += std::chrono::steady_clock::now() - started;
  f.function = std::move(function);
  if (const auto at = f.function.find('@');
      at != std::string::npos && f.function.find('(') == std::string::npos)
    f.function.resize(at); // "__libc_start_main@@GLIBC_2.34": the symbol version is noise
  if (!file.empty()) {
    f.file = std::move(file);
    f.line = static_cast<int>(line);
  }
  return f;
}

} // namespace gmem::tools
