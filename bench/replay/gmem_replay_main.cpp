// gmem_replay: replays allocation traces against allocator policies on the CPU and reports
// peak reserved / peak live (the fragmentation overhead) for each.
//   gmem_replay [--policies gmem,torch-like,...] [--pool-option NAME=VALUE]... [-v] [--check]
//               [--json FILE]
//               TRACE...
// --check walks the policy's structures (is_valid) after every event: slow, for testing.
// --pool-option changes gmem::pool_options for the gmem policies (e.g. grow_slack=0.5;
// reuse_safety=0: every free reusable at once, no fences), so a policy change can be judged on
// recorded traces before it is built into libgmem.so.
// Exit status: 0 done, 2 bad arguments or unreadable trace.
#include "bench/replay/alloc_trace.h"
#include "bench/replay/replay_policy.h"
#include "common/units.h"

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= s.size()) {
    std::size_t comma = s.find(',', at);
    if (comma == std::string::npos) comma = s.size();
    if (comma > at) out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

// The file name with its folder: bench/traces/<workload>/<recorder>-N.txt.gz reads as
// "<workload>/<recorder>-N.txt.gz", since the file name alone repeats across workloads.
const char* base_name(const std::string& path) {
  std::size_t slash = path.rfind('/');
  if (slash == std::string::npos || slash == 0) return path.c_str();
  std::size_t prev = path.rfind('/', slash - 1);
  return path.c_str() + (prev == std::string::npos ? 0 : prev + 1);
}

} // namespace

int main(int argc, char** argv) {
  std::vector<std::string> policies = gmem_bench::policy_names(), traces;
  std::string json;
  bool verbose = false, check = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--policies" && i + 1 < argc)
      policies = split(argv[++i]);
    else if (a == "--pool-option" && i + 1 < argc) {
      const std::string kv = argv[++i];
      const auto eq = kv.find('=');
      if (eq == std::string::npos ||
          !gmem_bench::set_gmem_pool_option(kv.substr(0, eq), kv.substr(eq + 1))) {
        std::fprintf(stderr,
                     "gmem_replay: --pool-option '%s' is not NAME=NUMBER of a known pool "
                     "option (counts take whole numbers); stopping\n",
                     kv.c_str());
        return 2;
      }
    } else if (a == "-v" || a == "--verbose")
      verbose = true;
    else if (a == "--check")
      check = true;
    else if (a == "--json" && i + 1 < argc)
      json = argv[++i];
    else if (a == "-h" || a == "--help") {
      std::printf("usage: gmem_replay [--policies %s] [--json FILE] TRACE...\n",
                  [&] {
                    std::string s;
                    for (auto& p : gmem_bench::policy_names())
                      s += (s.empty() ? "" : ",") + p;
                    return s;
                  }()
                      .c_str());
      return 0;
    } else
      traces.push_back(a);
  }
  if (traces.empty()) {
    std::fprintf(stderr, "gmem_replay: no trace given; see --help\n");
    return 2;
  }
  FILE* out = json.empty() ? nullptr : std::fopen(json.c_str(), "a");
  if (!json.empty() && !out)
    std::fprintf(stderr, "gmem_replay: cannot append to '%s'; table only\n", json.c_str());
  std::printf("%-32s %-28s %8s %12s %12s %7s %9s\n", "trace", "policy", "events", "peak live",
              "peak reserved", "ratio", "ns/event");
  for (const std::string& path : traces) {
    gmem_bench::trace_error err;
    auto trace = gmem_bench::read_trace(path, err);
    if (!trace) {
      std::fprintf(stderr, "gmem_replay: %s:%zu: %s; trace skipped\n", path.c_str(), err.line,
                   err.message.c_str());
      return 2;
    }
    for (const std::string& name : policies) {
      auto policy = gmem_bench::make_policy(name);
      if (!policy) {
        std::fprintf(stderr, "gmem_replay: unknown policy '%s'; skipped\n", name.c_str());
        continue;
      }
      gmem_bench::replay_result r = gmem_bench::replay(*trace, *policy, check);
      std::printf("%-32s %-28s %8zu %12s %12s %7.3f %9.1f%s\n", base_name(path), r.policy.c_str(),
                  r.events, gmem::format_bytes(r.peak_live_bytes).c_str(),
                  gmem::format_bytes(r.peak_reserved_bytes).c_str(), r.ratio(), r.ns_per_event,
                  r.failures ? " FAILURES" : "");
      if (r.invalid_after != 0)
        std::printf("    INVALID: the policy's structures are inconsistent after event %zu\n",
                    r.invalid_after);
      if (verbose && !policy->details().empty()) std::printf("    %s\n", policy->details().c_str());
      if (out)
        std::fprintf(out,
                     "{\"kind\":\"replay\",\"where\":\"cpu\",\"trace\":\"%s\",\"policy\":\"%s\","
                     "\"events\":%zu,\"failures\":%zu,\"peak_live\":%zu,\"peak_reserved\":%zu,"
                     "\"final_reserved\":%zu,\"ratio\":%.4f,\"ns_per_event\":%.1f,"
                     "\"skipped_frees\":%zu,\"details\":\"%s\"}\n",
                     base_name(path), r.policy.c_str(), r.events, r.failures, r.peak_live_bytes,
                     r.peak_reserved_bytes, r.final_reserved_bytes, r.ratio(), r.ns_per_event,
                     trace->skipped_frees, policy->details().c_str());
    }
  }
  if (out) std::fclose(out);
  return 0;
}
