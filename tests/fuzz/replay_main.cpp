// Replays a fuzz corpus through LLVMFuzzerTestOneInput without libFuzzer, so gcc-only machines
// keep the corpus's regression value. Usage: trace_reader_replay [DIR|FILE]... (default: the
// committed corpus). Exit 0 when every input ran; a crash fails the test run.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  std::vector<std::string> roots(argv + 1, argv + argc);
  if (roots.empty()) roots.push_back(GMEM_FUZZ_CORPUS);
  for (const auto& root : roots) {
    std::error_code ec;
    if (fs::is_directory(root, ec)) {
      for (const auto& e : fs::directory_iterator(root))
        inputs.push_back(e.path());
    } else {
      inputs.emplace_back(root);
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs in %s\n", roots.front().c_str());
    return 1;
  }
  for (const auto& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::printf("replay %s (%zu bytes)\n", p.c_str(), bytes.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs, no crash\n", inputs.size());
  return 0;
}
