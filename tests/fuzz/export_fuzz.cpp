// libFuzzer target for the exports (case R4 of docs/security.md): any bytes that decode to a trace
// must export to Chrome trace JSON and to a PyTorch snapshot pickle without a crash, a sanitizer
// report, or memory beyond what the trace holds (`make fuzz` runs it with an RSS limit). The
// committed corpus (tests/fuzz/corpus/trace_reader) is replayed by `make test` through
// replay_main.cpp, built with gcc.
#include <cstddef>
#include <cstdint>
#include <span>

#include <nlohmann/json.hpp>

#include "profiler/reader/trace_reader.h"
#include "tools/export/chrome_export.h"
#include "tools/export/pickle_writer.h"
#include "tools/export/pytorch_export.h"
#include "tools/symbolizer.h"

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
  return 0;
}
