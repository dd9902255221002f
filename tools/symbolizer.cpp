#include "tools/symbolizer.h"

#include <cxxabi.h>
#include <elfutils/libdwfl.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gmem::tools {
namespace {

// Separate debug info only from the system's directory (by build id, or the debuglink name
// under /usr/lib/debug/<module dir>): never from beside a module the trace names.
constexpr const char* k_debuginfo_path = "/usr/lib/debug";

// The module's file, opened without blocking and only if it is a regular file (symlinks in
// module paths are normal and followed). -1 otherwise, with `note` set unless it is missing.
int open_module(const std::string& path, std::string* note) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT) // a module of another host is the usual case: no note for it
      *note = std::string("cannot open: ") + std::strerror(errno) + ": not symbolized";
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    *note = "not a regular file: not symbolized";
    return -1;
  }
  return fd;
}

} // namespace

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
  if (!function.empty()) return function;
  const auto slash = module.rfind('/');
  char off[32];
  std::snprintf(off, sizeof off, "+0x%llx", static_cast<unsigned long long>(module_offset));
  return (slash == std::string::npos ? module : module.substr(slash + 1)) + off;
}

// One offline Dwfl context holding every module that could be opened.
struct symbolizer::dwfl_state {
  Dwfl_Callbacks callbacks{};
  char* debuginfo_path = nullptr;
  Dwfl* dwfl = nullptr;
  ~dwfl_state() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }
};

symbolizer::symbolizer(std::vector<module_range> modules)
    : modules_(std::move(modules)), dwfl_(std::make_unique<dwfl_state>()) {
  std::sort(modules_.begin(), modules_.end(),
            [](const module_range& a, const module_range& b) { return a.start < b.start; });
  dwfl_->callbacks.find_elf = dwfl_build_id_find_elf;
  dwfl_->callbacks.find_debuginfo = dwfl_standard_find_debuginfo;
  dwfl_->callbacks.section_address = dwfl_offline_section_address;
  dwfl_->debuginfo_path = const_cast<char*>(k_debuginfo_path);
  dwfl_->callbacks.debuginfo_path = &dwfl_->debuginfo_path;
  dwfl_->dwfl = dwfl_begin(&dwfl_->callbacks);
  if (dwfl_->dwfl == nullptr) return;
  dwfl_report_begin(dwfl_->dwfl);
  for (auto& m : modules_) {
    if (m.path.empty() || m.path[0] != '/') continue; // [vdso], anonymous: module+offset only
    // A missing or unreadable file just leaves this module's frames unresolved.
    const int fd = open_module(m.path, &m.note);
    if (fd < 0) continue;
    if (m.build_id.empty()) { // nothing to check the file against
      ::close(fd);
      m.note = "no build id recorded: not symbolized";
      continue;
    }
    Dwfl_Module* mod = dwfl_report_elf(dwfl_->dwfl, m.path.c_str(), m.path.c_str(), fd, m.base,
                                       false); // consumes fd on success
    if (mod == nullptr) {
      ::close(fd);
      m.note = "not an ELF file: not symbolized";
      continue;
    }
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    const int n = dwfl_module_build_id(mod, &bits, &vaddr);
    std::string hex;
    for (int i = 0; i < n; ++i) {
      char b[3];
      std::snprintf(b, sizeof b, "%02x", bits[i]);
      hex += b;
    }
    if (hex != m.build_id) {
      m.stale = true;
      m.note = "rebuilt since the run: not symbolized";
    }
  }
  dwfl_report_end(dwfl_->dwfl, nullptr, nullptr);
}

symbolizer::~symbolizer() = default;

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
  f.stale = m != nullptr && m->stale;
  if (m != nullptr) f.note = m->note;
  if (m == nullptr || !f.note.empty() || dwfl_->dwfl == nullptr) return f;
  const Dwarf_Addr pc = ip > 0 ? ip - 1 : ip;
  Dwfl_Module* mod = dwfl_addrmodule(dwfl_->dwfl, pc);
  if (mod == nullptr) return f;
  GElf_Off offset = 0;
  GElf_Sym sym;
  const char* name = dwfl_module_addrinfo(mod, pc, &offset, &sym, nullptr, nullptr, nullptr);
  f.function = demangle(name);
  if (const auto at = f.function.find('@');
      at != std::string::npos && f.function.find('(') == std::string::npos)
    f.function.resize(at); // "__libc_start_main@@GLIBC_2.34": the symbol version is noise
  if (Dwfl_Line* line = dwfl_module_getsrc(mod, pc); line != nullptr) {
    int lineno = 0;
    const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
    if (file != nullptr) {
      f.file = file;
      f.line = lineno;
    }
  }
  return f;
}

} // namespace gmem::tools
