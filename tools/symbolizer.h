// Turns recorded instruction pointers into demangled function, file:line and module, from the
// module map recorded in the trace, so it works after the traced process is gone. Uses elfutils
// libdwfl offline: each module's file is reported at its recorded load address.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace gmem::tools {

// One loaded object as recorded by the traced process.
struct module_range {
  std::string path;        // as the process saw it
  std::uint64_t base = 0;  // load bias (dl_iterate_phdr's dlpi_addr): file vaddr + base = ip
  std::uint64_t size = 0;  // extent of its mapped segments, from the lowest address
  std::uint64_t start = 0; // lowest mapped address (base + lowest PT_LOAD vaddr)
  std::string build_id;    // lower-case hex as recorded; "" = unknown (not checked)
  bool stale = false;      // set by the symbolizer: the file's build id differs from the record
  std::string note;        // set by the symbolizer when the file is not used: why
};

struct frame_info {
  std::uint64_t ip = 0;
  std::string function; // demangled; empty when unknown
  std::string file;     // source file; empty when there is no line information
  int line = 0;
  std::string module;              // module path; "?" when the ip is in no recorded module
  std::uint64_t module_offset = 0; // ip - module start, for unknown frames
  bool stale = false;              // the module's file was rebuilt since the run: not symbolized
  std::string note;                // why the module's file was not used ("" when it was)
  bool python = false;             // a Python frame (file, function, line; module "python")
  // A Python frame lent by another thread: set on the first lent frame shown, the line whose
  // call the allocating thread worked for ("backward()": stack_view.h).
  std::string via;

  // "main.cpp:42" or "" ; "function" or "libfoo.so+0x1234"; a lent frame's name ends in its
  // mark: "train [via backward()]".
  std::string location() const;
  std::string name() const;
};

// Invariant: every ip resolves to exactly one frame_info, cached; unknown parts stay empty and
// the frame is printed as module+offset, never dropped.
// A trace names the files to read, and its writer may be another user (docs/security.md,
// promise 3). So: a module path with a ".." component is never followed; every file is opened
// by gmem (open_regular_file: O_NOFOLLOW at the last component after resolving symlinks
// itself, O_NONBLOCK, O_NOCTTY, regular files only) and handed to elfutils as a descriptor;
// a module is used only when its build id equals the one recorded when the process ran;
// separate debug info comes only from /usr/lib/debug (by build id, or the debuglink name under
// /usr/lib/debug/<module dir>), never from beside a file the trace names, never through
// debuginfod. elfutils itself runs in a child process (forked at the first lookup); the reader
// waits for it `budget` in all, summed over every lookup: whatever a module makes elfutils do
// (a blocking open inside libdw, a huge DWARF section), the reader waits no longer, kills the
// child and leaves the remaining frames as module+offset with a note.
// The child is confined before elfutils sees a byte: every descriptor but its socket closed
// (stdin, stdout and stderr on /dev/null), an address-space limit (k_helper_memory above what
// it inherits, plus the bytes of the module files it opened, at most k_module_maps: elfutils maps
// each module whole), PR_SET_NO_NEW_PRIVS, not dumpable, and when the reader runs as root, the
// trace owner's uid and gid (run_as()) with no supplementary groups: a library another user
// planted is parsed with that user's rights at most.
// It dies with the thread that forked it (PR_SET_PDEATHSIG): the exporter forks from one
// scrape thread that lives as long as the exporter.
class symbolizer {
public:
  static constexpr std::chrono::milliseconds k_default_budget{5000};
  static constexpr std::uint64_t k_helper_memory = std::uint64_t{512} << 20;
  static constexpr std::uint64_t k_module_maps = std::uint64_t{16} << 30; // module files mapped
  static constexpr std::uint32_t k_nobody = 65534;
  static constexpr std::uint32_t k_reader = 0xffffffff; // run_as() never called
  explicit symbolizer(std::vector<module_range> modules,
                      std::chrono::milliseconds budget = k_default_budget);
  ~symbolizer();
  symbolizer(const symbolizer&) = delete;
  symbolizer& operator=(const symbolizer&) = delete;

  // `ip` is a return address except for the innermost frame; lookups use ip - 1 so a call at
  // the end of a function is attributed to its caller's line, not the next function.
  const frame_info& resolve(std::uint64_t ip);
  // Whose rights the child takes when the reader is root: the trace's owner (a root-owned
  // trace keeps root; symbolizer_uid() in trace_facts.h says nobody when the owner is
  // unknown). Before the first resolve(); never called, the reader's own.
  void run_as(std::uint32_t uid) { run_as_ = uid; }
  // The child's pid once started, else -1 (for tests).
  int helper_pid() const;

private:
  struct helper;
  const module_range* find_module(std::uint64_t ip) const;
  bool start_helper();
  void stop_helper(const std::string& why);

  std::vector<module_range> modules_; // sorted by start
  std::chrono::milliseconds budget_;
  std::chrono::steady_clock::duration spent_{}; // waiting for the child so far
  std::unique_ptr<helper> helper_;
  bool helper_started_ = false;
  std::string helper_note_; // why frames are no longer symbolized ("" while the helper works)
  std::uint32_t run_as_ = k_reader;
  std::unordered_map<std::uint64_t, frame_info> cache_;
};

std::string demangle(const char* symbol);

} // namespace gmem::tools
