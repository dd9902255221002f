#include "tools/prometheus/fleet_collector.h"

#include <pthread.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <set>
#include <tuple>

#include "profiler/reader/process_identity.h"
#include "profiler/reader/trace_listing.h"
#include "profiler/reader/trace_open.h"
#include "tools/analysis/trace_facts.h"

namespace gmem::tools {
namespace {

bool is_permission_problem(const gmem::trace::trace_entry& e) {
  if (e.problem.find("ermission") != std::string::npos ||
      e.problem.find("EACCES") != std::string::npos)
    return true;
  const uid_t me = geteuid();
  return me != 0 && e.owner_known && e.uid != me;
}

// civetweb's worker threads have small stacks and libdw's line tables need deep ones (a
// scrape crashed in dwarf_getsrclines on a 128 KiB stack), so scrapes run on a thread of their
// own with k_scrape_stack bytes.
constexpr std::size_t k_scrape_stack = 16u << 20;
// Counter samples decoded per process: the rates need the last two of each device.
constexpr std::uint64_t k_exported_samples = 4096;

} // namespace

struct fleet_collector::scrape_thread {
  pthread_t id{};
  std::mutex mu;
  std::condition_variable cv;
  bool asked = false, done = false, stop = false; // under mu
  std::vector<prometheus::MetricFamily> out;      // under mu
};

void* fleet_collector::scrape_main(void* arg) {
  const auto* self = static_cast<const fleet_collector*>(arg);
  scrape_thread& t = *self->thread_;
  std::unique_lock lock(t.mu);
  for (;;) {
    t.cv.wait(lock, [&] { return t.asked || t.stop; });
    if (t.stop) return nullptr;
    t.asked = false;
    lock.unlock();
    auto out = self->collect_guarded();
    lock.lock();
    t.out = std::move(out);
    t.done = true;
    t.cv.notify_all();
  }
}

fleet_collector::fleet_collector(exporter_options options) : options_(std::move(options)) {}

fleet_collector::~fleet_collector() {
  if (thread_ == nullptr) return;
  {
    std::lock_guard lock(thread_->mu);
    thread_->stop = true;
  }
  thread_->cv.notify_all();
  pthread_join(thread_->id, nullptr);
}

std::vector<prometheus::MetricFamily> fleet_collector::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_ == nullptr) {
    auto t = std::make_unique<scrape_thread>();
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, k_scrape_stack);
    thread_ = std::move(t);
    const int rc =
        pthread_create(&thread_->id, &attr, scrape_main, const_cast<fleet_collector*>(this));
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      thread_.reset();
      std::fprintf(stderr, "gmem exporter: warning: no thread for a scrape: %s\n",
                   std::strerror(rc));
      fleet_metrics m;
      m.add_health(last_);
      return m.take();
    }
  }
  std::unique_lock job(thread_->mu);
  thread_->asked = true;
  thread_->done = false;
  thread_->cv.notify_all();
  thread_->cv.wait(job, [&] { return thread_->done; });
  return std::move(thread_->out);
}

std::vector<prometheus::MetricFamily> fleet_collector::collect_guarded() const {
  try {
    return collect_locked();
  } catch (const std::exception& e) {
    // Never let a scrape take the HTTP thread down; the health series say what happened.
    std::fprintf(stderr, "gmem exporter: warning: scrape failed: %s\n", e.what());
    fleet_metrics m;
    m.add_health(last_);
    return m.take();
  }
}

std::string fleet_collector::user_name(std::uint32_t uid) const {
  if (auto it = users_.find(uid); it != users_.end()) return it->second;
  std::string name = std::to_string(uid);
  std::vector<char> buf(16384);
  passwd pw{};
  passwd* found = nullptr;
  if (getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr &&
      found->pw_name != nullptr && found->pw_name[0] != '\0')
    name = found->pw_name;
  if (users_.size() < 4096) users_.emplace(uid, name);
  return name;
}

std::string fleet_collector::executable(const std::string& object, std::uint32_t pid,
                                        bool running) const {
  // The kernel's word while the process runs (the trace's running state was checked against
  // /proc: its start time and owner), remembered for the object once it ended.
  if (running) {
    char path[4096];
    const std::string link = "/proc/" + std::to_string(pid) + "/exe";
    const ssize_t n = ::readlink(link.c_str(), path, sizeof path);
    if (n > 0 && static_cast<std::size_t>(n) < sizeof path) {
      std::string exe(path, static_cast<std::size_t>(n));
      exes_[object] = exe;
      return exe;
    }
  }
  const auto it = exes_.find(object);
  return it != exes_.end() ? it->second : std::string();
}

std::vector<prometheus::MetricFamily> fleet_collector::collect_locked() const {
  const auto t0 = std::chrono::steady_clock::now();
  scrape_health h;
  h.last_scrape_seconds = last_.last_scrape_seconds;
  h.scrapes = last_.scrapes;
  const std::uint64_t now = unix_now_ns();
  const auto me = static_cast<std::uint32_t>(geteuid());
  // Found by name and fstatat only; each user's objects are read only up to twice
  // --max-per-user of them (those whose pid runs first, then the newest by the start ticks in
  // their names), so however many objects one user plants, a scrape reads a bounded number.
  std::vector<gmem::trace::trace_entry> entries = gmem::trace::stat_traces();
  h.traces_found = entries.size();
  h.skipped_limit = preselect(entries, 2 * options_.max_per_user, me);
  // The budgets (time, bytes) count from here, the light reads of the preselected objects
  // included, in preselect()'s order (the exporter's own user's first, running processes
  // next, the smallest first), then in rank order: what they leave out ranks last. Bytes are
  // charged as read (a read is bounded: k_light_read_bytes, then --max-object-bytes, never more
  // than is left), so an object however large costs at most its bound, never its size.
  const auto reading = std::chrono::steady_clock::now();
  const auto budget = std::chrono::nanoseconds(options_.scrape_budget_ns);
  std::uint64_t bytes_left = options_.max_read_bytes;
  // The first of each pass is read whatever the time and the bytes left (up to its bound): a
  // scrape always serves something, its best ranked process (the exporter's own user's first)
  // however much the light reads of the others took.
  auto afford = [&](bool first) {
    return first || (bytes_left >= (std::uint64_t{64} << 10) &&
                     std::chrono::steady_clock::now() - reading <= budget);
  };
  // What one read may take: its bound, no more than is left (the first of a pass: its light
  // read's bound at least).
  auto allow = [&](std::uint64_t bound, bool first) {
    return std::min(bound,
                    first ? std::max(bytes_left, gmem::trace::k_light_read_bytes) : bytes_left);
  };
  auto charge = [&](std::uint64_t read) { bytes_left -= std::min(read, bytes_left); };
  std::vector<bool> read(entries.size(), false);
  for (std::size_t i = 0; i < entries.size(); ++i)
    if ((read[i] = afford(i == 0))) {
      gmem::trace::read_trace_entry(entries[i], allow(gmem::trace::k_light_read_bytes, i == 0));
      charge(entries[i].read_bytes);
    }
  std::vector<ranked_entry> wanted;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (!read[i]) {
      ++h.over_budget;
      continue;
    }
    if (!e.readable) {
      ++(is_permission_problem(e) ? h.skipped_unreadable : h.skipped_bad);
      continue;
    }
    if (e.state != gmem::trace::trace_state::running) {
      const std::uint64_t ended = e.ended_realtime_ns();
      if (options_.keep_exited_ns == 0 || (now > ended && now - ended > options_.keep_exited_ns)) {
        ++h.skipped_old;
        continue;
      }
    }
    wanted.push_back({&e, 0, 0});
  }
  rank_entries(wanted, now, me);
  fleet_metrics m;
  std::map<std::string, process_cache> kept;
  std::set<std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>> exported;
  std::map<std::uint32_t, std::size_t> per_user;
  std::set<std::pair<std::uint32_t, std::uint32_t>> running_pids;
  std::set<std::string> exported_names;
  for (const auto& w : wanted) {
    const gmem::trace::trace_entry& e = *w.entry;
    // One object per (uid, pid, start second): the label set names it. A second one is a copy
    // (or a forgery) of the owner's; the better ranked one stays.
    const std::uint64_t start_s = e.start_realtime_ns / 1'000'000'000u;
    // A running pid is one process: its objects beyond the first are copies, whatever start
    // time their headers claim (the name's start ticks matched /proc for each of them).
    const bool running = e.state == gmem::trace::trace_state::running;
    if (exported.count({e.uid, e.pid, start_s}) != 0 ||
        (running && !running_pids.insert({e.uid, e.pid}).second)) {
      ++h.duplicate;
      continue;
    }
    if (exported.size() >= options_.max_processes || per_user[e.uid] >= options_.max_per_user) {
      ++h.skipped_limit;
      continue;
    }
    if (!afford(exported.empty()) || m.series() >= options_.max_series) {
      ++h.over_budget;
      continue;
    }
    // The event ring is most of a trace's decoding cost; only the call-site series need it. The
    // rates need the last two samples of each device: the newest few thousand are decoded.
    std::uint32_t owner = 0;
    const bool sites = options_.top_sites != 0 && (options_.expose_all_users || e.uid == me);
    auto r = gmem::trace::open_shm(
        e.name,
        {.events = sites,
         .max_copy_bytes = allow(options_.max_object_read_bytes, exported.empty()),
         .max_samples = k_exported_samples},
        &owner);
    charge(r.value.info.copied_bytes != 0 ? r.value.info.copied_bytes
                                          : std::min<std::uint64_t>(e.bytes, 4096));
    if (!r) {
      // Gone between listing and reading (exited and cleaned, retention), or damaged.
      ++(access(("/dev/shm/" + e.name).c_str(), F_OK) != 0 ? h.vanished : h.skipped_bad);
      continue;
    }
    const gmem::trace::trace& t = r.value;
    // Replaced since it was listed: counted as it is now.
    const std::uint64_t start_now = t.info.start_realtime_ns / 1'000'000'000u;
    if (owner != e.uid || start_now != start_s) {
      if (exported.count({owner, t.info.pid, start_now}) != 0 ||
          per_user[owner] >= options_.max_per_user) {
        ++h.duplicate;
        continue;
      }
    }
    exported.insert({owner, t.info.pid, start_now});
    exported_names.insert(e.name);
    ++per_user[owner];
    const bool details = options_.expose_all_users || owner == me;
    const process_owner who{
        owner, user_name(owner), details,
        executable(e.name, t.info.pid, t.info.state == gmem::trace::trace_state::running),
        details && options_.command_line};
    if (!who.details || options_.top_sites == 0) {
      m.add_process(t, nullptr, who, options_);
      ++h.exported;
      continue;
    }
    process_cache c;
    if (auto it = cache_.find(e.name);
        it != cache_.end() && it->second.module_count == t.modules.size())
      c = std::move(it->second);
    if (!c.sites) {
      c.module_count = t.modules.size();
      c.symbols = std::make_unique<symbolizer>(module_ranges(t));
      c.symbols->run_as(owner);
      c.sites = std::make_unique<site_resolver>(*c.symbols);
    }
    m.add_process(t, c.sites.get(), who, options_);
    ++h.exported;
    kept.emplace(e.name, std::move(c));
  }
  cache_ = std::move(kept); // objects not exported this time lose their cache
  std::erase_if(exes_, [&](const auto& x) { return !exported_names.count(x.first); });
  m.add_health(h);
  last_ = h;
  ++last_.scrapes;
  last_.last_scrape_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m.take();
}

std::uint64_t preselect(std::vector<gmem::trace::trace_entry>& entries, std::size_t per_user,
                        std::uint32_t me) {
  struct key {
    std::uint32_t uid;
    bool alive;
    std::uint64_t ticks;
  };
  std::vector<key> keys(entries.size());
  std::vector<std::size_t> order(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    keys[i] = {e.uid, gmem::trace::process_alive(e.pid, e.proc_start_ticks), e.proc_start_ticks};
    order[i] = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (keys[a].uid != keys[b].uid) return keys[a].uid < keys[b].uid;
    if (keys[a].alive != keys[b].alive) return keys[a].alive;
    if (keys[a].ticks != keys[b].ticks) return keys[a].ticks > keys[b].ticks;
    return entries[a].name < entries[b].name;
  });
  std::vector<bool> keep(entries.size(), false);
  std::vector<std::size_t> turn(entries.size(), 0);
  std::size_t run = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    run = k > 0 && keys[order[k]].uid == keys[order[k - 1]].uid ? run + 1 : 0;
    keep[order[k]] = run < per_user;
    turn[order[k]] = run;
  }
  // The order of reading (and of the budgets): the caller's own objects, then running
  // processes (checked against /proc), users taking turns, the fewest bytes first. Nothing in
  // it is a field of the trace: only an object's owner, its size and /proc.
  std::vector<std::size_t> kept_order;
  for (const std::size_t i : order)
    if (keep[i]) kept_order.push_back(i);
  std::stable_sort(kept_order.begin(), kept_order.end(), [&](std::size_t a, std::size_t b) {
    const bool mine_a = keys[a].uid == me, mine_b = keys[b].uid == me;
    if (mine_a != mine_b) return mine_a;
    if (keys[a].alive != keys[b].alive) return keys[a].alive;
    if (turn[a] != turn[b]) return turn[a] < turn[b];
    return entries[a].allocated_bytes < entries[b].allocated_bytes;
  });
  std::vector<gmem::trace::trace_entry> kept;
  kept.reserve(kept_order.size());
  for (const std::size_t i : kept_order)
    kept.push_back(std::move(entries[i]));
  const std::uint64_t left = entries.size() - kept.size();
  entries = std::move(kept);
  return left;
}

void rank_entries(std::vector<ranked_entry>& wanted, std::uint64_t now_ns, std::uint32_t me) {
  // Tier 0: the process runs now, as the object's owner (checked against /proc). Tier 1: it
  // ended, and its times are in the past. Tier 2: it claims a start or an end in the future:
  // no process on this host wrote that, only someone forging traces.
  constexpr std::uint64_t k_slack_ns = 60'000'000'000u; // clocks of the writer and ours
  for (auto& w : wanted) {
    const auto& e = *w.entry;
    if (e.state == gmem::trace::trace_state::running)
      w.tier = e.start_realtime_ns > now_ns + k_slack_ns ? 2 : 0;
    else
      w.tier =
          e.start_realtime_ns > now_ns + k_slack_ns || e.ended_realtime_ns() > now_ns + k_slack_ns
              ? 2
              : 1;
  }
  // Within a tier, the exporter's own user first, then users take turns: each user's newest
  // first (by the start ticks of the object's name: for a running process those of /proc),
  // then everyone's second, ... so however many objects one user plants, every other user's
  // processes come before the extra ones. Within a turn the smallest object first: what a
  // trace costs to read is its size, and no start time a trace claims moves it ahead.
  auto mine = [&](const ranked_entry& r) { return r.entry->uid == me; };
  std::stable_sort(wanted.begin(), wanted.end(), [&](const auto& a, const auto& b) {
    if (a.tier != b.tier) return a.tier < b.tier;
    if (a.entry->uid != b.entry->uid) return a.entry->uid < b.entry->uid;
    if (a.entry->proc_start_ticks != b.entry->proc_start_ticks)
      return a.entry->proc_start_ticks > b.entry->proc_start_ticks;
    return a.entry->name < b.entry->name;
  });
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const bool same_group = i > 0 && wanted[i - 1].tier == wanted[i].tier &&
                            wanted[i - 1].entry->uid == wanted[i].entry->uid;
    wanted[i].turn = same_group ? wanted[i - 1].turn + 1 : 0;
  }
  std::stable_sort(wanted.begin(), wanted.end(), [&](const auto& a, const auto& b) {
    if (a.tier != b.tier) return a.tier < b.tier;
    if (mine(a) != mine(b)) return mine(a);
    if (a.turn != b.turn) return a.turn < b.turn;
    if (a.entry->allocated_bytes != b.entry->allocated_bytes)
      return a.entry->allocated_bytes < b.entry->allocated_bytes;
    return a.entry->name < b.entry->name;
  });
}

} // namespace gmem::tools
