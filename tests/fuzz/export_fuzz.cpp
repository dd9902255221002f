// libFuzzer target for the exports (cases R4, R13 and R21 of docs/security.md): any bytes that
// decode to a trace must export to Chrome trace JSON, to a PyTorch snapshot pickle and (where
// prometheus-cpp is installed) to the exporter's metric families, per device counters and sample
// rates included, without a crash, a sanitizer report, or memory beyond what the trace holds (`make
// fuzz` runs it with an RSS limit); the metrics hold one series per device, as the decoder keeps
// one record each, also from a bounded read of the same bytes as the exporter reads another
// user's object (case R27). The committed corpus (tests/fuzz/corpus/trace_reader) is replayed by
// `make test` through replay_main.cpp, built with gcc.
#include <cstddef>
#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

#include "profiler/reader/trace_reader.h"
#include "tests/fuzz/bounded_read.h"
#include "tools/export/chrome_export.h"
#include "tools/export/pickle_writer.h"
#include "tools/export/pytorch_export.h"
#include "tools/symbolizer.h"
#ifdef GMEM_FUZZ_METRICS
#include "tools/prometheus/fleet_metrics.h"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte*>(data), size);
  const gmem::trace::read_result r = gmem::trace::decode(bytes);
  if (!r) return 0;
  // No module files: the fuzzer must not open whatever paths its inputs name.
  gmem::tools::symbolizer symbols({});
  const std::string json = gmem::tools::chrome_trace(r.value, symbols)
                               .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::string pickle =
      gmem::tools::encode_pickle(gmem::tools::pytorch_snapshot(r.value, symbols));
  if (json.empty() || pickle.empty()) __builtin_trap();
#ifdef GMEM_FUZZ_METRICS
  // Another user's process as the exporter serves it (no call sites: no symbolizer runs).
  gmem::tools::fleet_metrics m;
  gmem::tools::exporter_options options;
  m.add_process(r.value, nullptr, {1000, "user", false, {}, false}, options);
  for (const auto& family : m.take())
    if (family.name == "gmem_live_bytes" && family.metric.size() != r.value.devices.size())
      __builtin_trap();
  // As the exporter reads another user's object: bounded, no events, the newest samples.
  const gmem::trace::read_result b = gmem::fuzz::read_bounded(
      data, size, {.events = false, .max_copy_bytes = 8192 + size % 4096 * 16, .max_samples = 64});
  if (b) {
    gmem::tools::fleet_metrics bm;
    bm.add_process(b.value, nullptr, {1000, "user", false, {}, false}, options);
    for (const auto& family : bm.take())
      if (family.name == "gmem_live_bytes" && family.metric.size() != b.value.devices.size())
        __builtin_trap();
  }
#endif
  return 0;
}
