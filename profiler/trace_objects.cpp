// Trace objects on this host: names, liveness, opening (shared memory and files), listing,
// saving and removal. Boost.Interprocess maps the objects (POSIX shm in /dev/shm).
#include <algorithm>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <iterator>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

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

bool parse_object_name(const std::string& name, std::uint32_t* pid, std::uint64_t* ticks) {
  unsigned long long p = 0, t = 0;
  int used = 0;
  if (std::sscanf(name.c_str(), "gmem.%llu.%llu%n", &p, &t, &used) != 2 ||
      static_cast<std::size_t>(used) != name.size() || p == 0 || p > 0xffffffffull ||
      name.find_first_of("+- ") != std::string::npos)
    return false;
  *pid = static_cast<std::uint32_t>(p);
  *ticks = t;
  return true;
}

bool process_alive(std::uint32_t pid, std::uint64_t proc_start_ticks) {
  return pid != 0 && start_ticks_of(pid) == proc_start_ticks && proc_start_ticks != 0;
}

read_result open_file(const std::string& path, const read_options& options) {
  try {
    // Read, not mapped: a file truncated while mapped (a copy still in progress) would kill the
    // reader with SIGBUS.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(path + ": " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || st.st_size <= 0) {
      ::close(fd);
      return fail(path + ": empty file, not a trace");
    }
    const auto size = static_cast<std::size_t>(st.st_size);
    std::vector<std::uint64_t> words(size / 8 + 1, 0); // 8-byte aligned for the decoder
    auto* out = reinterpret_cast<char*>(words.data());
    std::size_t got = 0;
    while (got < size) {
      const ssize_t n = ::read(fd, out + got, size - got);
      if (n <= 0) break;
      got += static_cast<std::size_t>(n);
    }
    ::close(fd);
    read_result r =
        decode(std::span<const std::byte>(reinterpret_cast<const std::byte*>(out), got), options);
    if (!r) {
      r.error.message = path + ": " + r.error.message;
      return r;
    }
    r.value.info.source = path;
    r.value.info.saved_file = true;
    return r;
  } catch (const std::exception& e) {
    return fail(path + ": cannot read: " + e.what());
  }
}

read_result open_shm(const std::string& name, const read_options& options) {
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_only);
    bip::offset_t size = 0;
    if (!shm.get_size(size) || size <= 0) return fail(name + ": empty shared-memory object");
    bip::mapped_region region(shm, bip::read_only);
    read_result r =
        decode(std::span<const std::byte>(static_cast<const std::byte*>(region.get_address()),
                                          region.get_size()),
               options);
    if (!r) {
      r.error.message = name + ": " + r.error.message;
      return r;
    }
    auto& info = r.value.info;
    info.source = "shm " + name;
    if (info.state != trace_state::exited)
      info.state = process_alive(info.pid, info.proc_start_ticks) ? trace_state::running
                                                                  : trace_state::crashed;
    return r;
  } catch (const bip::interprocess_exception& e) {
    return fail(name + ": cannot open the trace: " +
                (e.get_native_error() ? errno_text(e.get_native_error()) : std::string(e.what())));
  } catch (const std::exception& e) {
    return fail(name + ": cannot open the trace: " + e.what());
  }
}

std::vector<trace_entry> list_traces() {
  std::vector<trace_entry> out;
  DIR* dir = opendir(k_shm_dir);
  if (!dir) return out;
  while (dirent* d = readdir(dir)) {
    trace_entry e;
    e.name = d->d_name;
    if (!parse_object_name(e.name, &e.pid, &e.proc_start_ticks)) continue;
    struct stat st {};
    if (::lstat((k_shm_dir + e.name).c_str(), &st) == 0) {
      e.bytes = static_cast<std::uint64_t>(st.st_size);
      e.allocated_bytes = static_cast<std::uint64_t>(st.st_blocks) * 512;
      e.mtime_ns = static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ull +
                   static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
      e.uid = st.st_uid;
    }
    read_options light;
    light.events = light.samples = light.live = false;
    const read_result r = open_shm(e.name, light);
    e.readable = r.ok;
    if (r) {
      e.state = r.value.info.state;
      e.start_realtime_ns = r.value.info.start_realtime_ns;
      e.heartbeat_realtime_ns = r.value.info.heartbeat_realtime_ns;
      e.exit_realtime_ns = r.value.info.exit_realtime_ns;
      e.exit_live_count = r.value.info.exit_live_count;
      e.command_line = r.value.info.command_line;
    } else {
      e.problem = r.error.to_string();
      e.state =
          process_alive(e.pid, e.proc_start_ticks) ? trace_state::running : trace_state::crashed;
    }
    out.push_back(std::move(e));
  }
  closedir(dir);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.start_realtime_ns != b.start_realtime_ns ? a.start_realtime_ns < b.start_realtime_ns
                                                      : a.name < b.name;
  });
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

std::vector<std::string> apply_retention(const retention_policy& policy) {
  std::vector<std::string> removed;
  try {
    const std::vector<trace_entry> entries = list_traces();
    const auto plan = plan_retention(entries, policy, shm_space_now(), realtime_now_ns());
    const uid_t me = ::geteuid();
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (!plan[i].evict || (me != 0 && entries[i].uid != me)) continue;
      if (remove_shm(entries[i].name, nullptr)) removed.push_back(entries[i].name);
    }
  } catch (...) { // out of memory: nothing removed this time
  }
  return removed;
}

read_result open_pid(std::uint32_t pid, const read_options& options) {
  std::string best;
  std::uint64_t best_ticks = 0;
  bool best_alive = false;
  DIR* dir = opendir(k_shm_dir);
  if (!dir) return fail(std::string(k_shm_dir) + ": " + errno_text(errno));
  while (dirent* d = readdir(dir)) {
    std::uint32_t p = 0;
    std::uint64_t t = 0;
    if (!parse_object_name(d->d_name, &p, &t) || p != pid) continue;
    const bool alive = process_alive(p, t);
    if (best.empty() || (alive && !best_alive) || (alive == best_alive && t > best_ticks)) {
      best = d->d_name;
      best_ticks = t;
      best_alive = alive;
    }
  }
  closedir(dir);
  if (best.empty())
    return fail("no gmem trace for pid " + std::to_string(pid) +
                " (not run under gmem, GMEM_TRACE=0, or cleaned up)");
  return open_shm(best, options);
}

bool save_bytes(std::span<const std::byte> bytes, const std::string& path, bool snapshot,
                std::string* error) {
  auto set_error = [&](const std::string& what) {
    if (error) *error = path + ": " + what + ": " + errno_text(errno);
    return false;
  };
  const std::string tmp = path + ".tmp" + std::to_string(getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return set_error("cannot create");
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
  ok = (::close(fd) == 0) && ok;
  if (!ok) {
    set_error("cannot write");
    ::unlink(tmp.c_str());
    return false;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    set_error("cannot rename " + tmp);
    ::unlink(tmp.c_str());
    return false;
  }
  return true;
}

bool save_shm(const std::string& name, const std::string& path, std::string* error) {
  try {
    bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_only);
    bip::mapped_region region(shm, bip::read_only);
    std::span<const std::byte> bytes(static_cast<const std::byte*>(region.get_address()),
                                     region.get_size());
    std::uint32_t pid = 0;
    std::uint64_t ticks = 0;
    const bool alive = parse_object_name(name, &pid, &ticks) && process_alive(pid, ticks);
    return save_bytes(bytes, path, alive, error);
  } catch (const bip::interprocess_exception& e) {
    if (error)
      *error = name + ": cannot open the trace: " +
               (e.get_native_error() ? errno_text(e.get_native_error()) : std::string(e.what()));
    return false;
  }
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

} // namespace gmem::trace
