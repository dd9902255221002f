// Replays a fuzz corpus through LLVMFuzzerTestOneInput without libFuzzer, so gcc-only machines
// keep the corpus's regression value. Usage: trace_reader_replay [DIR|FILE]... (default: the
// committed corpus). Exit 0 when every input ran; a crash fails the test run, and so does a
// root that does not exist, an empty directory or a file that cannot be read: a corpus that
// went missing must not pass as one empty input.
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
    if (!fs::exists(root, ec)) {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", root.c_str());
      return 1;
    }
    if (fs::is_directory(root, ec)) {
      const std::size_t before = inputs.size();
      for (const auto& e : fs::directory_iterator(root))
        inputs.push_back(e.path());
      if (inputs.size() == before) {
        std::fprintf(stderr, "replay: no inputs in %s\n", root.c_str());
        return 1;
      }
    } else {
      inputs.emplace_back(root);
    }
  }
  for (const auto& p : inputs) {
    std::ifstream f(p, std::ios::binary);
    if (!f) {
      std::fprintf(stderr, "replay: %s: cannot be read\n", p.c_str());
      return 1;
    }
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::printf("replay %s (%zu bytes)\n", p.c_str(), bytes.size());
    std::fflush(stdout);
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs, no crash\n", inputs.size());
  return 0;
}
