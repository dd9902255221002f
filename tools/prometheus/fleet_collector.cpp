#include "tools/prometheus/fleet_collector.h"

#include <pthread.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
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
// scrape crashed in dwarf_getsrclines on a 128 KiB stack), so a scrape runs on a thread of
// its own with k_scrape_stack bytes.
constexpr std::size_t k_scrape_stack = 16u << 20;

struct scrape_job {
  const fleet_collector* self;
  std::vector<prometheus::MetricFamily> (*run)(const fleet_collector*);
  std::vector<prometheus::MetricFamily> out;
};

void* scrape_thread(void* arg) {
  auto* job = static_cast<scrape_job*>(arg);
  job->out = job->run(job->self);
  return nullptr;
}

} // namespace

std::vector<prometheus::MetricFamily> fleet_collector::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  scrape_job job{this, [](const fleet_collector* c) { return c->collect_guarded(); }, {}};
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, k_scrape_stack);
  pthread_t th{};
  const int rc = pthread_create(&th, &attr, scrape_thread, &job);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    std::fprintf(stderr, "gmem exporter: warning: no thread for a scrape: %s\n", std::strerror(rc));
    fleet_metrics m;
    m.add_health(last_);
    return m.take();
  }
  pthread_join(th, nullptr);
  return std::move(job.out);
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
  h.skipped_limit = preselect(entries, 2 * options_.max_per_user);
  for (auto& e : entries)
    gmem::trace::read_trace_entry(e);
  std::vector<ranked_entry> wanted;
  for (const auto& e : entries) {
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
  rank_entries(wanted, now);
  // The budget counts from here: in rank order, so the traces it leaves out are those ranked
  // last (one user's many objects, times in the future), and the first is always read.
  const auto reading = std::chrono::steady_clock::now();
  const auto budget = std::chrono::nanoseconds(options_.scrape_budget_ns);
  fleet_metrics m;
  std::map<std::string, process_cache> kept;
  std::set<std::tuple<std::uint32_t, std::uint32_t, std::uint64_t>> exported;
  std::map<std::uint32_t, std::size_t> per_user;
  std::set<std::pair<std::uint32_t, std::uint32_t>> running_pids;
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
    if (std::chrono::steady_clock::now() - reading > budget) {
      ++h.over_budget;
      continue;
    }
    const bool details = options_.expose_all_users || e.uid == me;
    // The event ring is most of a trace's decoding cost; only the call-site series need it.
    std::uint32_t owner = 0;
    auto r = gmem::trace::open_shm(e.name, {.events = details && options_.top_sites != 0}, &owner);
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
    ++per_user[owner];
    const process_owner who{owner, user_name(owner), options_.expose_all_users || owner == me};
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
      c.sites = std::make_unique<site_resolver>(*c.symbols);
    }
    m.add_process(t, c.sites.get(), who, options_);
    ++h.exported;
    kept.emplace(e.name, std::move(c));
  }
  cache_ = std::move(kept); // objects not exported this time lose their cache
  m.add_health(h);
  last_ = h;
  ++last_.scrapes;
  last_.last_scrape_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m.take();
}

std::uint64_t preselect(std::vector<gmem::trace::trace_entry>& entries, std::size_t per_user) {
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
  std::size_t run = 0;
  for (std::size_t k = 0; k < order.size(); ++k) {
    run = k > 0 && keys[order[k]].uid == keys[order[k - 1]].uid ? run + 1 : 0;
    keep[order[k]] = run < per_user;
  }
  std::vector<gmem::trace::trace_entry> kept;
  kept.reserve(entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i)
    if (keep[i]) kept.push_back(std::move(entries[i]));
  const std::uint64_t left = entries.size() - kept.size();
  entries = std::move(kept);
  return left;
}

void rank_entries(std::vector<ranked_entry>& wanted, std::uint64_t now_ns) {
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
  // Within a tier, users take turns: each user's newest first, then everyone's second, ... so
  // however many objects one user plants, every other user's processes come before the extra
  // ones. Ties (same tier and turn): the newest first, then by name (a stable order).
  std::stable_sort(wanted.begin(), wanted.end(), [](const auto& a, const auto& b) {
    if (a.tier != b.tier) return a.tier < b.tier;
    if (a.entry->uid != b.entry->uid) return a.entry->uid < b.entry->uid;
    if (a.entry->start_realtime_ns != b.entry->start_realtime_ns)
      return a.entry->start_realtime_ns > b.entry->start_realtime_ns;
    return a.entry->name < b.entry->name;
  });
  for (std::size_t i = 0; i < wanted.size(); ++i) {
    const bool same_group = i > 0 && wanted[i - 1].tier == wanted[i].tier &&
                            wanted[i - 1].entry->uid == wanted[i].entry->uid;
    wanted[i].turn = same_group ? wanted[i - 1].turn + 1 : 0;
  }
  std::stable_sort(wanted.begin(), wanted.end(), [](const auto& a, const auto& b) {
    if (a.tier != b.tier) return a.tier < b.tier;
    if (a.turn != b.turn) return a.turn < b.turn;
    if (a.entry->start_realtime_ns != b.entry->start_realtime_ns)
      return a.entry->start_realtime_ns > b.entry->start_realtime_ns;
    return a.entry->name < b.entry->name;
  });
}

} // namespace gmem::tools
