// gmem-exporter: the HTTP side of `gmem exporter` (prometheus-cpp's Exposer serving the
// fleet_collector). The gmem command checks the options and runs this program, which lives
// beside it; it can also be run directly (a systemd unit, a container).
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/exposer.h>

#include "tools/prometheus/exporter_options.h"
#include "tools/prometheus/fleet_collector.h"

int main(int argc, char** argv) {
  using namespace gmem::tools;
  CLI::App app{k_exporter_description, "gmem exporter"};
  exporter_options o;
  add_exporter_options(app, o);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "gmem: error: %s (see: gmem exporter --help)\n", e.what());
    return 2;
  }
  if (const std::string err = check(o); !err.empty()) {
    std::fprintf(stderr, "gmem: error: %s\n", err.c_str());
    return 2;
  }
  // Signals are taken by sigwait() below: blocked before the HTTP threads start, so that
  // every thread inherits the mask and none of them is interrupted.
  // A shell starts background jobs with SIGINT ignored, and sigwait() never sees an ignored
  // signal: restore the default disposition first.
  for (const int s : {SIGINT, SIGTERM, SIGHUP})
    signal(s, SIG_DFL);
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // civetweb gives each connection a worker thread until its request is read: any local
    // user's idle connections hold workers, and a scrape queued behind them waits. So many
    // workers (64) and a short request timeout (500 ms; a scraper sends its request at once):
    // 128 idle connections cost a scrape about one timeout. No keep-alive: a worker is free
    // again after each response.
    exposer = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", o.listen, "num_threads", std::to_string(o.threads), "request_timeout_ms",
        std::to_string(o.request_timeout_ms), "enable_keep_alive", "no"});
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gmem: error: cannot listen on %s: %s\n", o.listen.c_str(), e.what());
    return 6;
  }
  auto collector = std::make_shared<fleet_collector>(o);
  exposer->RegisterCollectable(collector);
  const auto ports = exposer->GetListeningPorts();
  const std::string host = o.listen.substr(0, o.listen.rfind(':'));
  std::fprintf(stderr,
               "gmem exporter: serving http://%s:%d/metrics (top %zu sites, growth "
               "window %s, exited processes kept %s)\n",
               host.c_str(), ports.empty() ? 0 : ports.front(), o.top_sites,
               o.growth_window.c_str(), o.keep_exited.c_str());
  if (geteuid() != 0)
    std::fprintf(stderr,
                 "gmem exporter: running as uid %u: only this user's traces are "
                 "exported (run it as root for every user's)\n",
                 static_cast<unsigned>(geteuid()));
  std::fflush(stderr);
  int sig = 0;
  sigwait(&stop, &sig);
  std::fprintf(stderr, "gmem exporter: stopping (signal %d)\n", sig);
  exposer.reset();
  return 0;
}
