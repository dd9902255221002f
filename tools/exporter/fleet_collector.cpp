#include "tools/exporter/fleet_collector.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "profiler/trace_reader.h"
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

std::vector<prometheus::MetricFamily> fleet_collector::collect_locked() const {
  const auto t0 = std::chrono::steady_clock::now();
  scrape_health h;
  h.last_scrape_seconds = last_.last_scrape_seconds;
  h.scrapes = last_.scrapes;
  const std::uint64_t now = unix_now_ns();
  std::vector<gmem::trace::trace_entry> entries = gmem::trace::list_traces();
  h.traces_found = entries.size();
  std::vector<const gmem::trace::trace_entry*> wanted;
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
    wanted.push_back(&e);
  }
  // Running processes first, then the newest.
  std::stable_sort(wanted.begin(), wanted.end(), [](const auto* a, const auto* b) {
    const bool ra = a->state == gmem::trace::trace_state::running;
    const bool rb = b->state == gmem::trace::trace_state::running;
    if (ra != rb) return ra;
    return a->start_realtime_ns > b->start_realtime_ns;
  });
  if (wanted.size() > options_.max_processes) {
    h.skipped_limit = wanted.size() - options_.max_processes;
    wanted.resize(options_.max_processes);
  }
  fleet_metrics m;
  std::map<std::string, process_cache> kept;
  for (const auto* e : wanted) {
    // The event ring is most of a trace's decoding cost; only the call-site series need it.
    auto r = gmem::trace::open_shm(e->name, {.events = options_.top_sites != 0});
    if (!r) {
      // Gone between listing and reading (exited and cleaned, retention), or damaged.
      ++(access(("/dev/shm/" + e->name).c_str(), F_OK) != 0 ? h.vanished : h.skipped_bad);
      continue;
    }
    const gmem::trace::trace& t = r.value;
    process_cache c;
    if (auto it = cache_.find(e->name);
        it != cache_.end() && it->second.module_count == t.modules.size())
      c = std::move(it->second);
    if (!c.sites) {
      c.module_count = t.modules.size();
      c.symbols = std::make_unique<symbolizer>(module_ranges(t));
      c.sites = std::make_unique<site_resolver>(*c.symbols);
    }
    m.add_process(t, *c.sites, options_);
    ++h.exported;
    kept.emplace(e->name, std::move(c));
  }
  cache_ = std::move(kept); // objects not exported this time lose their cache
  m.add_health(h);
  last_ = h;
  ++last_.scrapes;
  last_.last_scrape_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return m.take();
}

} // namespace gmem::tools
