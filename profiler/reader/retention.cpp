#include "profiler/reader/retention.h"

#include <algorithm>
#include <map>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "profiler/format/trace_clock.h"
#include "profiler/reader/object_names.h"
#include "profiler/reader/trace_save.h"

namespace gmem::trace {

namespace {

std::uint64_t realtime_now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(ts.tv_nsec);
}

} // namespace

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
  // Times come from the trace and the object's mtime, which its owner sets: one in the future
  // (forged, or a clock set back) is not believed. Such a trace ranks as the oldest, removed
  // first when over budget, so a trace "from 2030" is never the newest; it does not age.
  auto rank = [now](const trace_entry& e) {
    const std::uint64_t t = e.ended_realtime_ns();
    return t > now ? 0 : t;
  };
  std::stable_sort(gone.begin(), gone.end(), [&](std::size_t a, std::size_t b) {
    return rank(entries[a]) < rank(entries[b]);
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

std::vector<retention_decision> plan_retention_by_owner(const std::vector<trace_entry>& entries,
                                                        const retention_policy& policy,
                                                        std::uint64_t shm_total_bytes,
                                                        std::uint64_t now) {
  std::vector<retention_decision> out(entries.size());
  std::map<std::uint32_t, std::vector<std::size_t>> by_owner;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (entries[i].owner_known)
      by_owner[entries[i].uid].push_back(i);
    else
      out[i].reason = "kept: owner unknown";
  }
  for (const auto& [uid, indexes] : by_owner) {
    std::vector<trace_entry> own;
    std::uint64_t own_bytes = 0;
    for (std::size_t i : indexes) {
      own.push_back(entries[i]);
      own_bytes += entries[i].allocated_bytes;
    }
    // As that user's own job measures /dev/shm: as if only their objects were in it.
    const shm_space space{shm_total_bytes,
                          shm_total_bytes > own_bytes ? shm_total_bytes - own_bytes : 0};
    const auto plan = plan_retention(own, policy, space, now);
    for (std::size_t k = 0; k < indexes.size(); ++k)
      out[indexes[k]] = plan[k];
  }
  return out;
}

std::vector<std::string> apply_retention(const retention_policy& policy, const std::string& spare,
                                         const scan_limits& limits) {
  std::vector<std::string> removed;
  try {
    // A job's own cleanup sees only its user's objects: it never opens, reads or maps anyone
    // else's (a huge readable object named like a trace costs it nothing), and others' objects
    // never count against its budget: /dev/shm is measured as if only this user's objects were
    // in it, so nobody's junk makes it remove the user's own traces. Root's too: `gmem clean
    // --expired --all-users` applies each user's budget to that user's objects.
    const auto me = static_cast<std::uint32_t>(::geteuid());
    std::uint64_t own_bytes = 0;
    const std::uint64_t started = monotonic_ns();
    // The traces' walk reads the user's own traces and can spend the whole pass on them when
    // there are many: the registries' walk (names and a pid check) keeps a quarter of it.
    const std::uint64_t registries_ns = limits.max_ns / 4;
    scan_limits traces = limits;
    traces.max_ns = limits.max_ns - registries_ns;
    const std::vector<trace_entry> entries = list_traces_of(me, &own_bytes, traces);
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
    // The registries' walk gets what the traces' walk left of the time, a quarter at least.
    scan_limits rest = limits;
    if (limits.max_ns != 0) {
      const std::uint64_t spent = monotonic_ns() - started;
      rest.max_ns = std::max(registries_ns, spent < limits.max_ns ? limits.max_ns - spent : 0);
    }
    for (const ipc_registry& r : list_ipc_registries(rest))
      if (r.uid == me && !r.running && ::unlink((k_shm_dir + r.name).c_str()) == 0)
        removed.push_back(r.name);
  } catch (...) { // out of memory: nothing removed this time
  }
  return removed;
}

} // namespace gmem::trace
