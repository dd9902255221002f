// Options of `gmem exporter`, declared once: the gmem command shows them in its help and
// checks them, then runs the gmem-exporter program (built with prometheus-cpp) that declares
// the same options again from this header.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "common/units.h"

namespace gmem::tools {

inline constexpr const char* k_exporter_default_listen = "127.0.0.1:9464";
inline constexpr const char* k_exporter_program = "gmem-exporter";

struct exporter_options {
  std::string listen = k_exporter_default_listen;
  std::size_t top_sites = 5;         // K: call sites per process by live bytes, and by growth
  std::string growth_window = "10m"; // window of the growth ranking
  std::string keep_exited = "15m";   // how long an exited process stays in the output
  std::string scrape_budget = "15s"; // reading stops after this long; the rest waits
  std::size_t max_processes = 256;   // traces exported per scrape, newest first
  std::size_t max_per_user = 64;     // of which at most this many of one user
  std::size_t max_series = 100000;   // series per scrape: processes beyond it wait
  std::string max_bytes = "1G";      // bytes of trace objects a scrape reads
  std::string max_object = "64M";    // of them, bytes of one trace object
  std::size_t threads = 64;          // HTTP worker threads
  // A connection that has not sent its whole request within this long is closed: an idle
  // connection holds a worker at most this long (civetweb gives each one a worker).
  std::string request_timeout = "500ms";
  bool expose_all_users = false; // call sites (and command lines) of every user's processes
  bool command_line = false;     // label command, where call sites are shown
  // Parsed by check():
  std::uint64_t growth_window_ns = 0;
  std::uint64_t keep_exited_ns = 0;
  std::uint64_t scrape_budget_ns = 0;
  std::uint64_t request_timeout_ms = 0;
  std::uint64_t max_read_bytes = 0;
  std::uint64_t max_object_read_bytes = 0;
};

inline constexpr const char* k_exporter_description =
    "Serve Prometheus/OpenMetrics metrics for every traced process on this host (live, or "
    "exited within --keep-exited): per process and device memory, fragmentation, rates, OOMs "
    "and limits, and each process's top call sites by live bytes and by growth. Read-only: "
    "never blocks a traced program. See docs/monitoring.md.";

inline void add_exporter_options(CLI::App& sub, exporter_options& o) {
  sub.add_option("--listen", o.listen,
                 "ADDR:PORT to serve /metrics on (default 127.0.0.1:9464, loopback only; port 0 "
                 "picks a free one; 0.0.0.0:9464 for every interface)");
  sub.add_option("--top-sites", o.top_sites,
                 "K: call sites exported per process by live bytes and K more by growth, for "
                 "the processes of the exporter's own uid (every user's with "
                 "--expose-all-users) (default 5; 0 = no call-site series)");
  sub.add_option("--growth-window", o.growth_window,
                 "window of the call-site growth ranking (default 10m)");
  sub.add_option("--keep-exited", o.keep_exited,
                 "keep exporting a process this long after it ended (default 15m; 0 = only "
                 "running processes)");
  sub.add_option("--max-processes", o.max_processes,
                 "at most this many traces per scrape: running processes first, users taking "
                 "turns, traces that contradict the clock last (default 256)");
  sub.add_option("--scrape-budget", o.scrape_budget,
                 "stop reading traces once a scrape has spent this long on them; those left "
                 "are counted as over_budget (default 15s; keep it below Prometheus's "
                 "scrape_timeout)");
  sub.add_option("--max-per-user", o.max_per_user,
                 "at most this many traces of one user per scrape (default 64)");
  sub.add_option("--max-series", o.max_series,
                 "stop adding processes to a scrape once it holds this many series; those left "
                 "are counted as over_budget (default 100000)");
  sub.add_option("--max-bytes", o.max_bytes,
                 "read at most this many bytes of trace objects per scrape (the bytes really "
                 "read, counted after each read); those left are counted as over_budget "
                 "(default 1G)");
  sub.add_option("--max-object-bytes", o.max_object,
                 "read at most this many bytes of one trace object per scrape (its header and "
                 "counters first; sections beyond are cut or left out) (default 64M)");
  sub.add_option("--threads", o.threads,
                 "HTTP worker threads, 1 to 256 (default 64): each connection holds one until "
                 "its request has arrived");
  sub.add_option("--request-timeout", o.request_timeout,
                 "close a connection that has not sent its whole request within this long "
                 "(default 500ms, at most 10s): N idle connections delay a scrape by about "
                 "N / --threads times this");
  sub.add_flag("--expose-all-users", o.expose_all_users,
               "also export other users' call sites (labels frame and caller: their function "
               "names and source paths), and with --command-line their command lines; without "
               "it only the exporter's own uid's. Whoever reaches --listen reads them");
  sub.add_flag("--command-line", o.command_line,
               "add label command (the command line, cut to 100 bytes) for the processes whose "
               "call sites are exported (default off: command lines hold paths and tokens, and "
               "whoever reaches --listen reads them)");
}

// Parses the durations and checks ranges; "" when all is well, else the message.
inline std::string check(exporter_options& o) {
  const auto w = parse_duration_ns(o.growth_window);
  if (!w || *w == 0)
    return "--growth-window '" + o.growth_window + "' is not a positive duration (e.g. 10m, 1h)";
  const auto k = parse_duration_ns(o.keep_exited);
  if (!k) return "--keep-exited '" + o.keep_exited + "' is not a duration (e.g. 15m, 0)";
  const auto b = parse_duration_ns(o.scrape_budget);
  if (!b || *b == 0)
    return "--scrape-budget '" + o.scrape_budget + "' is not a positive duration (e.g. 15s)";
  if (o.top_sites > 100) return "--top-sites " + std::to_string(o.top_sites) + " is over 100";
  if (o.max_processes == 0) return "--max-processes must be at least 1";
  if (o.max_per_user == 0) return "--max-per-user must be at least 1";
  if (o.max_series == 0) return "--max-series must be at least 1";
  const auto mb = parse_size(o.max_bytes);
  if (!mb || *mb == 0) return "--max-bytes '" + o.max_bytes + "' is not a size (e.g. 1G, 512M)";
  const auto ob = parse_size(o.max_object);
  if (!ob || *ob < (std::uint64_t{1} << 20))
    return "--max-object-bytes '" + o.max_object + "' is not a size of 1M or more";
  if (o.threads == 0 || o.threads > 256) return "--threads must be 1 to 256";
  const auto rt = parse_duration_ns(o.request_timeout);
  if (!rt || *rt < 1'000'000 || *rt > 10'000'000'000)
    return "--request-timeout '" + o.request_timeout + "' is not a duration from 1ms to 10s";
  const auto colon = o.listen.rfind(':');
  if (colon == std::string::npos || colon + 1 == o.listen.size() ||
      o.listen.find_first_not_of("0123456789", colon + 1) != std::string::npos ||
      o.listen.size() - colon > 6 || std::stoul(o.listen.substr(colon + 1)) > 65535)
    return "--listen '" + o.listen + "' is not ADDR:PORT (e.g. 127.0.0.1:9464)";
  o.growth_window_ns = *w;
  o.keep_exited_ns = *k;
  o.scrape_budget_ns = *b;
  o.request_timeout_ms = *rt / 1'000'000;
  o.max_read_bytes = *mb;
  o.max_object_read_bytes = *ob;
  return {};
}

} // namespace gmem::tools
