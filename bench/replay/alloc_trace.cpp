#include "bench/replay/alloc_trace.h"

#include <zlib.h>

#include <charconv>
#include <unordered_map>

namespace gmem_bench {
namespace {

std::string_view next_field(std::string_view& rest) {
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t'))
    rest.remove_prefix(1);
  std::size_t n = 0;
  while (n < rest.size() && rest[n] != ' ' && rest[n] != '\t' && rest[n] != '\r')
    ++n;
  std::string_view f = rest.substr(0, n);
  rest.remove_prefix(n);
  return f;
}

bool parse_number(std::string_view s, int base, std::uint64_t& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && p == s.data() + s.size();
}

} // namespace

std::optional<alloc_trace> parse_trace(std::string_view text, trace_error& error) {
  alloc_trace t;
  std::unordered_map<std::uint64_t, std::pair<std::uint32_t, std::size_t>> live; // addr -> id
  std::size_t live_bytes = 0, line_no = 0;
  auto fail = [&](const char* what) {
    error = {line_no, what};
    return std::nullopt;
  };
  while (!text.empty()) {
    ++line_no;
    std::size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text.remove_prefix(eol == std::string_view::npos ? text.size() : eol + 1);
    std::string_view rest = line;
    std::string_view op = next_field(rest);
    if (op.empty() || op.front() == '#') continue;
    std::uint64_t addr = 0;
    if (!parse_number(next_field(rest), 16, addr)) return fail("expected a hex address");
    if (op == "a") {
      std::uint64_t bytes = 0, stream = 0;
      if (!parse_number(next_field(rest), 10, bytes)) return fail("expected a byte count");
      std::string_view s = next_field(rest);
      if (!s.empty() && !parse_number(s, 16, stream)) return fail("expected a hex stream");
      if (auto it = live.find(addr); it != live.end()) { // the free was not recorded
        t.events.push_back({false, it->second.first, 0, 0});
        live_bytes -= it->second.second;
        live.erase(it);
        ++t.implicit_frees;
      }
      const std::uint32_t id = t.allocations++;
      t.events.push_back({true, id, static_cast<std::size_t>(bytes), stream});
      live[addr] = {id, static_cast<std::size_t>(bytes)};
      live_bytes += static_cast<std::size_t>(bytes);
      if (live_bytes > t.peak_live_bytes) t.peak_live_bytes = live_bytes;
    } else if (op == "f") {
      auto it = live.find(addr);
      if (it == live.end()) {
        ++t.skipped_frees;
        continue;
      }
      t.events.push_back({false, it->second.first, 0, 0});
      live_bytes -= it->second.second;
      live.erase(it);
    } else {
      return fail("unknown event (expected 'a' or 'f')");
    }
  }
  return t;
}

// gzread reads plain files unchanged, so committed .txt.gz traces and fresh .txt ones both work.
std::optional<alloc_trace> read_trace(const std::string& path, trace_error& error) {
  gzFile in = gzopen(path.c_str(), "rb");
  if (in == nullptr) {
    error = {0, "cannot open " + path};
    return std::nullopt;
  }
  std::string text;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(in, buf, sizeof buf)) > 0)
    text.append(buf, static_cast<std::size_t>(n));
  const bool failed = n < 0;
  gzclose(in);
  if (failed) {
    error = {0, "cannot decompress " + path};
    return std::nullopt;
  }
  return parse_trace(text, error);
}

} // namespace gmem_bench
