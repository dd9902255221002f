// Trace objects on this host: names, liveness, opening (shared memory and files), listing,
// saving and removal. Boost.Interprocess maps the objects (POSIX shm in /dev/shm).
#include <algorithm>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <memory>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "common/safe_file.h"
#include "profiler/trace_layout.h"
#include "profiler/trace_reader.h"

namespace gmem::trace {

namespace bip = boost::interprocess;

namespace {

constexpr const char* k_shm_dir = "/dev/shm/";

std::uint64_t realtime_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

std::string errno_text(int e) {
  return std::strerror(e);
}

read_result fail(std::string message) {
  read_result r;
  r.error = {0, std::move(message)};
  return r;
}

// Reads /proc/<pid>/stat field 22 (start time in clock ticks since boot); 0 if gone.
std::uint64_t start_ticks_of(std::uint32_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  if (paren == std::string::npos) return 0;
  std::size_t pos = paren + 2;
  for (int field = 3; field < 22; ++field) {
    pos = text.find(' ', pos);
    if (pos == std::string::npos) return 0;
    ++pos;
  }
  return std::strtoull(text.c_str() + pos, nullptr, 10);
}

} // namespace

std::string object_name(std::uint32_t pid, std::uint64_t proc_start_ticks) {
  return "gmem." + std::to_string(pid) + "." + std::to_string(proc_start_ticks);
}

std::string object_name(std::uint32_t pid, std::uint64_t proc_start_ticks, std::uint64_t nonce) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(nonce));
  return object_name(pid, proc_start_ticks) + "." + hex;
}

bool parse_object_name(const std::string& name, std::uint32_t* pid, std::uint64_t* ticks) {
  unsigned long long p = 0, t = 0;
  int used = 0;
  if (std::sscanf(name.c_str(), "gmem.%llu.%llu%n", &p, &t, &used) != 2 || p == 0 ||
      p > 0xffffffffull || name.find_first_of("+- ") != std::string::npos)
    return false;
  const auto rest = static_cast<std::size_t>(used);
  // Nothing more, or "." and exactly 16 lower-case hex digits (the recorder's random part).
  if (rest != name.size() &&
      (name.size() != rest + 17 || name[rest] != '.' ||
       name.find_first_not_of("0123456789abcdef", rest + 1) != std::string::npos))
    return false;
  *pid = static_cast<std::uint32_t>(p);
  *ticks = t;
  return true;
}

std::uint64_t ticks_after_uptime(std::string_view uptime, long hz) {
  // Whole numbers, not a double: 1234.57 x 100 is 123456.99999999999 as doubles, one tick
  // short, and a process that started in the current tick would then look as if it started
  // in the future (its trace refused as not its own).
  if (hz <= 0 || hz > 1'000'000) hz = 100;
  std::uint64_t seconds = 0, fraction_ns = 0, scale = 1'000'000'000;
  std::size_t i = 0;
  for (; i < uptime.size() && uptime[i] >= '0' && uptime[i] <= '9'; ++i)
    seconds = seconds * 10 + static_cast<std::uint64_t>(uptime[i] - '0');
  if (i == 0 || i > 12) return ~std::uint64_t{0}; // none, or beyond 30,000 years
  if (i < uptime.size() && uptime[i] == '.')
    for (++i; i < uptime.size() && uptime[i] >= '0' && uptime[i] <= '9' && scale > 1; ++i) {
      scale /= 10;
      fraction_ns += static_cast<std::uint64_t>(uptime[i] - '0') * scale;
    }
  const auto per_second = static_cast<std::uint64_t>(hz);
  return seconds * per_second + fraction_ns * per_second / 1'000'000'000 + 1;
}

bool process_alive(std::uint32_t pid, std::uint64_t proc_start_ticks) {
  return pid != 0 && start_ticks_of(pid) == proc_start_ticks && proc_start_ticks != 0;
}

namespace {

// The largest object or file a reader will copy. Holes (pages never written) are not copied,
// so the memory a reader uses is bounded by the bytes the file really holds.
constexpr std::uint64_t k_max_trace_bytes = std::uint64_t{64} << 30;

const char* file_kind(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symbolic link";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "not a regular file";
}

// A private, page-aligned copy of a trace: decoding it cannot be disturbed by anyone who
// truncates, regrows or rewrites the file meanwhile (a shared mapping would die with SIGBUS).
class private_copy {
public:
  private_copy() = default;
  ~private_copy() {
    if (base_ != nullptr) ::munmap(base_, mapped_);
  }
  private_copy(const private_copy&) = delete;
  private_copy& operator=(const private_copy&) = delete;

  // Opens `path` without blocking (a FIFO would hang a blocking open), regular files only,
  // and, with `no_follow`, never through a symlink. Fills `why` and returns false otherwise.
  bool read(const std::string& path, bool no_follow, std::string* why) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC |
                                            (no_follow ? O_NOFOLLOW : 0));
    if (fd < 0) {
      *why = errno == ELOOP && no_follow ? std::string("a symbolic link, not a trace")
                                         : errno_text(errno);
      return false;
    }
    const bool ok = read_fd(fd, why);
    ::close(fd);
    return ok;
  }

  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(base_), size_}; }
  const struct stat& file_stat() const { return st_; }

private:
  bool read_fd(int fd, std::string* why) {
    if (::fstat(fd, &st_) != 0) {
      *why = errno_text(errno);
      return false;
    }
    if (!S_ISREG(st_.st_mode)) {
      *why = std::string(file_kind(st_.st_mode)) + ", not a trace";
      return false;
    }
    if (st_.st_size <= 0) {
      *why = "empty, not a trace";
      return false;
    }
    const auto size = static_cast<std::uint64_t>(st_.st_size);
    if (size > k_max_trace_bytes) {
      *why = std::to_string(size) + " bytes, larger than any trace gmem writes (" +
             std::to_string(k_max_trace_bytes >> 30) + " GiB)";
      return false;
    }
    // Only the bytes a trace uses: the first page, then up to the total_bytes of the header
    // copied with it (bytes the writer added later are not read: the copy stays consistent
    // with its own header). A file that is not a trace (another magic: junk named like one)
    // costs one page however large it is: nothing a reader would not decode is read.
    const std::uint64_t page = 4096;
    std::uint64_t want = std::min(size, page);
    mapped_ = static_cast<std::size_t>(size) + 8;
    void* p = ::mmap(nullptr, mapped_, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      *why = "cannot allocate a copy: " + errno_text(errno);
      return false;
    }
    base_ = p;
    ::madvise(p, mapped_, MADV_HUGEPAGE); // fewer faults while copying big objects
    auto* out = static_cast<char*>(p);
    std::uint64_t copied = 0;
    for (int round = 0; round < 4 && copied < want; ++round) {
      copy_range(fd, out, copied, want);
      copied = want;
      std::uint64_t total = 0;
      std::memcpy(&total, out + offsetof(layout::header, total_bytes), sizeof total);
      if (std::memcmp(out, layout::k_magic, sizeof layout::k_magic) == 0)
        want = std::min(size, std::max(total, want));
    }
    size_ = static_cast<std::size_t>(copied);
    return true;
  }

  // Copies the data ranges of [from, to): untouched pages of the copy read as the zeros of a
  // hole, and a file truncated meanwhile leaves the rest zero.
  static void copy_range(int fd, char* out, std::uint64_t from, std::uint64_t to) {
    auto at = static_cast<off_t>(from);
    const auto end = static_cast<off_t>(to);
    while (at < end) {
      off_t data = ::lseek(fd, at, SEEK_DATA);
      if (data < 0 && errno == ENXIO) break; // only a hole is left
      if (data < 0 || data < at) data = at;  // no SEEK_DATA here: copy everything
      if (data >= end) break;
      off_t hole = ::lseek(fd, data, SEEK_HOLE);
      // Always progress, even when the file changes between the two calls.
      if (hole <= data || hole > end) hole = end;
      for (off_t o = data; o < hole;) {
        const ssize_t n = ::pread(fd, out + o, static_cast<std::size_t>(hole - o), o);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return; // truncated while we read: the rest stays zero
        o += n;
      }
      at = hole;
    }
  }

  void* base_ = nullptr;
  std::size_t mapped_ = 0;
  std::size_t size_ = 0;
  struct stat st_ {};
};

// The uid that owns /proc/<pid>, or false when there is no such process.
bool proc_uid(std::uint32_t pid, std::uint32_t* uid) {
  struct stat st {};
  if (::stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0) return false;
  *uid = st.st_uid;
  return true;
}

// Is the process of (pid, ticks) running now, as `uid`? An object someone else created under
// a running process's name is not that process's trace.
bool alive_as(std::uint32_t pid, std::uint64_t ticks, std::uint32_t uid) {
  std::uint32_t running_uid = 0;
  return process_alive(pid, ticks) && proc_uid(pid, &running_uid) && running_uid == uid;
}

// Clock ticks since boot now, plus one: no process on this boot started at or after it.
std::uint64_t now_ticks() {
  std::ifstream f("/proc/uptime");
  std::string text;
  if (!(f >> text)) return ~std::uint64_t{0};
  return ticks_after_uptime(text, ::sysconf(_SC_CLK_TCK));
}

read_result open_shm_as(const std::string& name, const read_options& options,
                        std::uint32_t* owner) {
  std::uint32_t pid = 0;
  std::uint64_t ticks = 0;
  if (!parse_object_name(name, &pid, &ticks))
    return fail(name + ": not a gmem trace name (gmem.<pid>.<ticks>)");
  // A trace grows while it is written: a copy taken as it grew may hold a header that names
  // more bytes than were copied. A few more copies catch it between two growths.
  read_result r;
  std::unique_ptr<private_copy> copy;
  for (int attempt = 0; attempt < 4; ++attempt) {
    copy = std::make_unique<private_copy>();
    std::string why;
    if (!copy->read(k_shm_dir + name, true, &why))
      return fail(name + ": cannot open the trace: " + why);
    r = decode(copy->bytes(), options);
    if (r || r.error.offset != offsetof(layout::header, total_bytes)) break;
  }
  if (owner) *owner = copy->file_stat().st_uid;
  if (!r) {
    r.error.message = name + ": " + r.error.message;
    return r;
  }
  auto& info = r.value.info;
  if (info.pid != pid || info.proc_start_ticks != ticks)
    return fail(name + ": the header says pid " + std::to_string(info.pid) + " started at tick " +
                std::to_string(info.proc_start_ticks) +
                ": not the trace its name claims (forged or damaged)");
  info.source = "shm " + name;
  info.object = name;
  if (info.state != trace_state::exited)
    info.state = alive_as(pid, ticks, copy->file_stat().st_uid) ? trace_state::running
                                                                : trace_state::crashed;
  return r;
}

} // namespace

read_result open_file(const std::string& path, const read_options& options) {
  // A file the user named: symlinks are followed (the user chose the path), but only a
  // regular file is read, without blocking, into a private copy.
  private_copy copy;
  std::string why;
  if (!copy.read(path, false, &why)) return fail(path + ": " + why);
  read_result r = decode(copy.bytes(), options);
  if (!r) {
    r.error.message = path + ": " + r.error.message;
    return r;
  }
  r.value.info.source = path;
  r.value.info.saved_file = true;
  return r;
}

read_result open_shm(const std::string& name, const read_options& options) {
  return open_shm_as(name, options, nullptr);
}

read_result open_shm(const std::string& name, const read_options& options, std::uint32_t* owner) {
  return open_shm_as(name, options, owner);
}

namespace {

// The trace objects in /dev/shm; with `only_owner`, only that uid's (the others' are never
// opened: their names and fstatat() are all that is looked at) and `*owner_bytes` receives the
// space that uid's objects hold, whatever their names.
// The trace objects in /dev/shm, by name and fstatat() only (nothing opened); with
// `only_owner`, only that uid's, and `*owner_bytes` receives the space that uid's objects hold,
// whatever their names.
std::vector<trace_entry> stat_traces_where(const std::uint32_t* only_owner,
                                           std::uint64_t* owner_bytes) {
  std::vector<trace_entry> out;
  DIR* dir = opendir(k_shm_dir);
  if (!dir) return out;
  while (dirent* d = readdir(dir)) {
    trace_entry e;
    e.name = d->d_name;
    if (only_owner != nullptr) {
      struct stat own {};
      if (::fstatat(dirfd(dir), d->d_name, &own, AT_SYMLINK_NOFOLLOW) != 0 ||
          own.st_uid != *only_owner)
        continue;
      if (S_ISREG(own.st_mode)) *owner_bytes += static_cast<std::uint64_t>(own.st_blocks) * 512;
    }
    if (!parse_object_name(e.name, &e.pid, &e.proc_start_ticks)) continue;
    struct stat st {};
    if (::fstatat(dirfd(dir), e.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      e.bytes = static_cast<std::uint64_t>(st.st_size);
      e.allocated_bytes = static_cast<std::uint64_t>(st.st_blocks) * 512;
      e.mtime_ns = static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ull +
                   static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
      e.uid = st.st_uid;
      e.owner_known = true;
    }
    e.problem = "not read";
    out.push_back(std::move(e));
  }
  closedir(dir);
  return out;
}

void sort_entries(std::vector<trace_entry>& out) {
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.start_realtime_ns != b.start_realtime_ns ? a.start_realtime_ns < b.start_realtime_ns
                                                      : a.name < b.name;
  });
}

std::vector<trace_entry> list_traces_where(const std::uint32_t* only_owner,
                                           std::uint64_t* owner_bytes) {
  std::vector<trace_entry> out = stat_traces_where(only_owner, owner_bytes);
  for (trace_entry& e : out)
    read_trace_entry(e);
  sort_entries(out);
  return out;
}

} // namespace

std::vector<trace_entry> list_traces() {
  return list_traces_where(nullptr, nullptr);
}

std::vector<trace_entry> stat_traces() {
  return stat_traces_where(nullptr, nullptr);
}

void read_trace_entry(trace_entry& e) {
  read_options light;
  light.events = light.samples = light.live = false;
  std::uint32_t owner = 0;
  const read_result r = open_shm_as(e.name, light, &owner);
  e.readable = r.ok;
  if (r) {
    e.problem.clear();
    e.uid = owner;
    e.state = r.value.info.state;
    e.start_realtime_ns = r.value.info.start_realtime_ns;
    e.heartbeat_realtime_ns = r.value.info.heartbeat_realtime_ns;
    e.exit_realtime_ns = r.value.info.exit_realtime_ns;
    e.exit_live_count = r.value.info.exit_live_count;
    e.command_line = r.value.info.command_line;
    e.live_bytes = e.reserved_bytes = 0;
    for (const auto& dev : r.value.devices) {
      e.live_bytes += dev.stats.live_bytes;
      e.reserved_bytes += dev.stats.reserved_bytes;
    }
  } else {
    // "cannot open" has no byte offset worth showing; a decoding error has.
    e.problem = r.error.message.find(": cannot open the trace: ") != std::string::npos
                    ? r.error.message
                    : r.error.to_string();
    e.state = e.owner_known && alive_as(e.pid, e.proc_start_ticks, e.uid) ? trace_state::running
                                                                          : trace_state::crashed;
  }
}

std::vector<ipc_registry> list_ipc_registries() {
  std::vector<ipc_registry> out;
  DIR* dir = opendir(k_shm_dir);
  if (!dir) return out;
  constexpr std::string_view k_prefix = "gmem-ipc.";
  while (dirent* d = readdir(dir)) {
    const std::string_view name = d->d_name;
    // "gmem-ipc." digits "." 16 lower-case hex digits, nothing else.
    if (name.substr(0, k_prefix.size()) != k_prefix) continue;
    const std::size_t dot = name.find('.', k_prefix.size());
    if (dot == std::string_view::npos || dot == k_prefix.size() || dot - k_prefix.size() > 10 ||
        name.size() != dot + 17 || name.find_first_not_of("0123456789", k_prefix.size()) != dot ||
        name.find_first_not_of("0123456789abcdef", dot + 1) != std::string_view::npos)
      continue;
    const std::uint64_t pid =
        std::strtoull(std::string(name.substr(k_prefix.size())).c_str(), nullptr, 10);
    if (pid == 0 || pid > 0xffffffffu) continue;
    struct stat st {};
    if (::fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue;
    ipc_registry r;
    r.name = name;
    r.pid = static_cast<std::uint32_t>(pid);
    r.uid = st.st_uid;
    std::uint32_t running_uid = 0;
    r.running = proc_uid(r.pid, &running_uid) && running_uid == r.uid;
    out.push_back(std::move(r));
  }
  closedir(dir);
  return out;
}

std::uint64_t trace_entry::ended_realtime_ns() const {
  if (exit_realtime_ns != 0) return exit_realtime_ns;
  if (readable && heartbeat_realtime_ns != 0) return heartbeat_realtime_ns;
  return mtime_ns;
}

retention_policy retention_policy::from_options(const options& o) {
  retention_policy p;
  p.keep_max = o.keep_max;
  p.keep_free = o.keep_free;
  p.keep_age_ns = o.keep_age;
  return p;
}

shm_space shm_space_now() {
  struct statvfs v {};
  if (::statvfs(k_shm_dir, &v) != 0) return {};
  return {static_cast<std::uint64_t>(v.f_blocks) * v.f_frsize,
          static_cast<std::uint64_t>(v.f_bavail) * v.f_frsize};
}

std::vector<retention_decision> plan_retention(const std::vector<trace_entry>& entries,
                                               const retention_policy& policy, shm_space space,
                                               std::uint64_t now) {
  std::vector<retention_decision> out(entries.size());
  std::vector<std::size_t> gone; // entries of processes that are gone, oldest first
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const trace_entry& e = entries[i];
    if (e.state == trace_state::running) {
      out[i].reason = "running";
      continue;
    }
    gone.push_back(i);
  }
  std::stable_sort(gone.begin(), gone.end(), [&](std::size_t a, std::size_t b) {
    return entries[a].ended_realtime_ns() < entries[b].ended_realtime_ns();
  });
  const std::uint64_t max_bytes = policy.keep_max.resolve(space.total_bytes);
  const std::uint64_t want_free = policy.keep_free.resolve(space.total_bytes);
  std::uint64_t kept = 0, free_bytes = space.free_bytes;
  for (std::size_t i : gone)
    kept += entries[i].allocated_bytes;
  for (std::size_t i : gone) {
    const trace_entry& e = entries[i];
    const std::uint64_t ended = e.ended_realtime_ns();
    const std::uint64_t age = now > ended ? now - ended : 0;
    std::string why;
    if (policy.keep_age_ns != 0 && age > policy.keep_age_ns)
      why = "removed: ended " + format_duration_ns(age) + " ago, longer than GMEM_TRACE_KEEP_AGE";
    else if ((policy.keep_max.is_percent || policy.keep_max.bytes != 0) && kept > max_bytes)
      why = "removed: traces of ended processes hold " + format_bytes(kept) + ", over " +
            "GMEM_TRACE_KEEP_MAX " + format_bytes(max_bytes);
    else if (space.total_bytes != 0 && free_bytes < want_free)
      why = "removed: /dev/shm has " + format_bytes(free_bytes) + " free, less than " +
            "GMEM_TRACE_KEEP_FREE " + format_bytes(want_free);
    if (!why.empty()) {
      out[i] = {true, std::move(why)};
      kept -= e.allocated_bytes;
      free_bytes += e.allocated_bytes;
      continue;
    }
    out[i].reason =
        "kept: " + std::string(to_string(e.state)) + " " + format_duration_ns(age) + " ago";
    if (policy.keep_age_ns != 0)
      out[i].reason += ", removed in " + format_duration_ns(policy.keep_age_ns - age);
  }
  return out;
}

std::vector<std::string> apply_retention(const retention_policy& policy, const std::string& spare) {
  std::vector<std::string> removed;
  try {
    // A job's own cleanup sees only its user's objects: it never opens, reads or maps anyone
    // else's (a huge readable object named like a trace costs it nothing), and others' objects
    // never count against its budget: /dev/shm is measured as if only this user's objects were
    // in it, so nobody's junk makes it remove the user's own traces. Root's too: `gmem clean
    // --expired --all-users` applies the budget to everyone's.
    const auto me = static_cast<std::uint32_t>(::geteuid());
    std::uint64_t own_bytes = 0;
    const std::vector<trace_entry> entries = list_traces_where(&me, &own_bytes);
    shm_space space = shm_space_now();
    if (space.total_bytes != 0)
      space.free_bytes = space.total_bytes > own_bytes ? space.total_bytes - own_bytes : 0;
    const auto plan = plan_retention(entries, policy, space, realtime_now_ns());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (!plan[i].evict || !entries[i].owner_known || entries[i].uid != me ||
          entries[i].name == spare)
        continue;
      if (remove_shm(entries[i].name, nullptr)) removed.push_back(entries[i].name);
    }
    for (const ipc_registry& r : list_ipc_registries())
      if (r.uid == me && !r.running && ::unlink((k_shm_dir + r.name).c_str()) == 0)
        removed.push_back(r.name);
  } catch (...) { // out of memory: nothing removed this time
  }
  return removed;
}

pid_object find_pid_object(std::uint32_t pid) {
  pid_object out;
  struct candidate {
    std::string name;
    std::uint64_t ticks;
    std::uint32_t uid;
  };
  std::vector<candidate> found;
  DIR* dir = opendir(k_shm_dir);
  if (!dir) {
    out.error = std::string(k_shm_dir) + ": " + errno_text(errno);
    return out;
  }
  while (dirent* d = readdir(dir)) {
    std::uint32_t p = 0;
    std::uint64_t t = 0;
    if (!parse_object_name(d->d_name, &p, &t) || p != pid) continue;
    struct stat st {};
    if (::fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
      continue; // not an object anyone could have written a trace into
    found.push_back({d->d_name, t, st.st_uid});
  }
  closedir(dir);
  out.found_any = !found.empty();
  // The running process: only the object named after its start time and owned by its uid.
  const std::uint64_t running_ticks = start_ticks_of(pid);
  std::uint32_t running_uid = 0;
  const bool running = running_ticks != 0 && proc_uid(pid, &running_uid);
  if (running) {
    for (const auto& c : found) {
      if (c.ticks != running_ticks) continue;
      if (c.uid == running_uid) {
        out.name = c.name;
        out.uid = c.uid;
        out.running = true;
        return out;
      }
      out.error = c.name + " is owned by uid " + std::to_string(c.uid) + " but pid " +
                  std::to_string(pid) + " runs as uid " + std::to_string(running_uid) +
                  ": not its trace";
    }
    // The pid names the process running now. An object of an earlier process with this pid
    // (or one anybody planted under a made-up start time) is not its trace: name it to read it.
    if (out.error.empty() && !found.empty()) {
      std::string names;
      for (const auto& c : found)
        names += (names.empty() ? "" : ", ") + c.name + " (uid " + std::to_string(c.uid) + ")";
      out.error = "it is running (uid " + std::to_string(running_uid) +
                  ") but has no gmem trace of its own; " + names +
                  (found.size() == 1 ? " belongs" : " belong") +
                  " to no running process (name it to read it)";
    }
    return out;
  }
  // Earlier processes with this pid: they started before the running one (or before now).
  // Their start times are only names, which any user can choose, so the newest is taken only
  // among objects of one owner: ours if we have any, else the only owner there is.
  const std::uint64_t before = running ? running_ticks : now_ticks();
  std::vector<const candidate*> dead;
  for (const auto& c : found)
    if (c.ticks < before) dead.push_back(&c);
  if (dead.empty()) {
    if (out.error.empty() && !found.empty())
      out.error = "the objects named after pid " + std::to_string(pid) +
                  " claim start times this process and boot never had: not its trace";
    return out;
  }
  const auto self = static_cast<std::uint32_t>(::geteuid());
  bool mixed = false, have_self = false;
  for (const auto* c : dead) {
    have_self = have_self || c->uid == self;
    mixed = mixed || c->uid != dead.front()->uid;
  }
  if (mixed && !have_self) {
    std::string names;
    for (const auto* c : dead)
      names += (names.empty() ? "" : ", ") + c->name + " (uid " + std::to_string(c->uid) + ")";
    out.error = "traces of pid " + std::to_string(pid) + " belong to different users: " + names +
                "; name the object to read";
    return out;
  }
  const std::uint32_t owner = have_self ? self : dead.front()->uid;
  const candidate* best = nullptr;
  for (const auto* c : dead)
    if (c->uid == owner && (best == nullptr || c->ticks > best->ticks)) best = c;
  out.error.clear();
  out.name = best->name;
  out.uid = best->uid;
  return out;
}

pid_object find_child_object(std::uint32_t pid, std::uint64_t proc_start_ticks, std::uint32_t uid) {
  pid_object out;
  DIR* dir = opendir(k_shm_dir);
  if (!dir) {
    out.error = std::string(k_shm_dir) + ": " + errno_text(errno);
    return out;
  }
  while (dirent* d = readdir(dir)) {
    std::uint32_t p = 0;
    std::uint64_t t = 0;
    if (!parse_object_name(d->d_name, &p, &t) || p != pid) continue;
    out.found_any = true;
    struct stat st {};
    if (t != proc_start_ticks || ::fstatat(dirfd(dir), d->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !S_ISREG(st.st_mode))
      continue;
    if (st.st_uid != uid) {
      out.error = std::string(d->d_name) + " is owned by uid " + std::to_string(st.st_uid) +
                  ", not by uid " + std::to_string(uid) + " that pid " + std::to_string(pid) +
                  " ran as: not its trace";
      continue;
    }
    out.name = d->d_name;
    out.uid = st.st_uid;
    out.error.clear();
    break;
  }
  closedir(dir);
  return out;
}

read_result open_pid(std::uint32_t pid, const read_options& options) {
  const pid_object o = find_pid_object(pid);
  if (o.name.empty())
    return fail(!o.error.empty() ? o.error
                                 : "no gmem trace for pid " + std::to_string(pid) +
                                       " (not run under gmem, GMEM_TRACE=0, or cleaned up)");
  return open_shm(o.name, options);
}

bool save_bytes(std::span<const std::byte> bytes, const std::string& path, bool snapshot,
                std::string* error) {
  auto set_error = [&](const std::string& what) {
    if (error) *error = path + ": " + what + ": " + errno_text(errno);
    return false;
  };
  // A new file of ours beside the target (mkstemp: O_EXCL, 0600), never a name someone else
  // may have planted; fsync()ed, then renamed to the target only if nothing or a regular file
  // of ours is there (a symlink, FIFO or device node there is neither followed nor replaced).
  std::string tmp;
  const int fd = create_temp_beside(path, &tmp);
  if (fd < 0) return set_error("cannot create a temporary file beside it");
  constexpr std::size_t k_page = 4096;
  std::vector<std::byte> page(k_page);
  bool ok = true;
  for (std::size_t at = 0; ok && at < bytes.size(); at += k_page) {
    const std::size_t n = std::min(k_page, bytes.size() - at);
    for (std::size_t k = 0; k < n; k += 8) { // atomic word copies: the writer may be running
      std::uint64_t w = 0;
      if (n - k >= 8 && reinterpret_cast<std::uintptr_t>(bytes.data() + at + k) % 8 == 0)
        w = layout::load_word(reinterpret_cast<const std::uint64_t*>(bytes.data() + at + k));
      else
        std::memcpy(&w, bytes.data() + at + k, std::min<std::size_t>(8, n - k));
      std::memcpy(page.data() + k, &w, std::min<std::size_t>(8, n - k));
    }
    if (at == 0 && snapshot && n >= offsetof(layout::header, flags) + 8) {
      std::uint64_t flags;
      std::memcpy(&flags, page.data() + offsetof(layout::header, flags), 8);
      flags |= layout::k_flag_snapshot;
      std::memcpy(page.data() + offsetof(layout::header, flags), &flags, 8);
    }
    const bool zero = std::all_of(page.begin(), page.begin() + static_cast<std::ptrdiff_t>(n),
                                  [](std::byte b) { return b == std::byte{0}; });
    if (zero && n == k_page) continue; // a hole
    ok = ::pwrite(fd, page.data(), n, static_cast<off_t>(at)) == static_cast<ssize_t>(n);
  }
  ok = ok && ::ftruncate(fd, static_cast<off_t>(bytes.size())) == 0;
  if (!ok) {
    set_error("cannot write");
    ::close(fd);
    ::unlink(tmp.c_str());
    return false;
  }
  return commit_temp_over_own_file(fd, tmp, path, error);
}

bool save_shm(const std::string& name, const std::string& path, std::string* error) {
  std::uint32_t pid = 0;
  std::uint64_t ticks = 0;
  if (!parse_object_name(name, &pid, &ticks)) {
    if (error) *error = name + ": not a gmem trace name (gmem.<pid>.<ticks>)";
    return false;
  }
  private_copy copy;
  std::string why;
  if (!copy.read(k_shm_dir + name, true, &why)) {
    if (error) *error = name + ": cannot open the trace: " + why;
    return false;
  }
  const bool alive = alive_as(pid, ticks, copy.file_stat().st_uid);
  return save_bytes(copy.bytes(), path, alive, error);
}

bool remove_shm(const std::string& name, std::string* error) {
  std::uint32_t pid = 0;
  std::uint64_t ticks = 0;
  if (!parse_object_name(name, &pid, &ticks)) {
    if (error) *error = name + ": not a gmem trace name (gmem.<pid>.<ticks>)";
    return false;
  }
  if (!bip::shared_memory_object::remove(name.c_str())) {
    if (error) *error = name + ": cannot remove: " + errno_text(errno);
    return false;
  }
  return true;
}

bool proc_identity(std::uint32_t pid, std::uint64_t* proc_start_ticks, std::uint32_t* uid) {
  *proc_start_ticks = start_ticks_of(pid);
  return *proc_start_ticks != 0 && proc_uid(pid, uid);
}

} // namespace gmem::trace
