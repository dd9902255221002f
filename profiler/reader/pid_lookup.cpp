#include "profiler/reader/pid_lookup.h"

#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

#include "profiler/reader/object_names.h"
#include "profiler/reader/process_identity.h"
#include "profiler/reader/trace_open.h"

namespace gmem::trace {

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
    out.error = std::string(k_shm_dir) + ": " + std::strerror(errno);
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
  const std::uint64_t running_ticks = proc_start_ticks(pid);
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
  const std::uint64_t before = running ? running_ticks : ticks_now();
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
    out.error = std::string(k_shm_dir) + ": " + std::strerror(errno);
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
  if (o.name.empty()) {
    read_result r;
    r.error.message = !o.error.empty() ? o.error
                                       : "no gmem trace for pid " + std::to_string(pid) +
                                             " (not run under gmem, GMEM_TRACE=0, or cleaned up)";
    return r;
  }
  return open_shm(o.name, options);
}

} // namespace gmem::trace
