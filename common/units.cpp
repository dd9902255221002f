#include "common/units.h"

#include <cmath>
#include <cstdio>

namespace gmem {
namespace {

// Splits "1.5G" into 1.5 and "G". Rejects signs, exponents, empty numbers and trailing junk
// in the number part.
bool split_number(std::string_view text, double& value, std::string_view& suffix) {
  std::size_t i = 0;
  while (i < text.size() && text[i] == ' ')
    ++i;
  std::size_t start = i;
  bool digits = false, dot = false;
  for (; i < text.size(); ++i) {
    char c = text[i];
    if (c >= '0' && c <= '9') {
      digits = true;
    } else if (c == '.' && !dot) {
      dot = true;
    } else {
      break;
    }
  }
  if (!digits) return false;
  std::string number(text.substr(start, i - start));
  char* end = nullptr;
  value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) return false;
  suffix = text.substr(i);
  while (!suffix.empty() && suffix.front() == ' ')
    suffix.remove_prefix(1);
  while (!suffix.empty() && suffix.back() == ' ')
    suffix.remove_suffix(1);
  return true;
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

} // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
  double value = 0;
  std::string_view suffix;
  if (!split_number(text, value, suffix)) return std::nullopt;
  double scale = 0;
  if (suffix.empty() || iequals(suffix, "b")) {
    scale = 1;
  } else {
    static constexpr std::string_view k_units = "kmgt";
    std::size_t unit = k_units.find(lower(suffix.front()));
    std::string_view rest = suffix.substr(1);
    if (unit == std::string_view::npos ||
        !(rest.empty() || iequals(rest, "b") || iequals(rest, "ib")))
      return std::nullopt;
    scale = std::ldexp(1.0, 10 * static_cast<int>(unit + 1));
  }
  double bytes = value * scale;
  if (bytes >= 18446744073709551615.0) return std::nullopt;
  if (scale == 1 && value != std::floor(value)) return std::nullopt; // "1.5" bytes
  return static_cast<std::uint64_t>(bytes);
}

std::optional<size_or_percent> parse_size_or_percent(std::string_view text) {
  while (!text.empty() && text.back() == ' ')
    text.remove_suffix(1);
  if (!text.empty() && text.back() == '%') {
    double value = 0;
    std::string_view suffix;
    if (!split_number(text.substr(0, text.size() - 1), value, suffix) || !suffix.empty())
      return std::nullopt;
    if (!(value > 0 && value <= 100)) return std::nullopt;
    size_or_percent r;
    r.percent = value;
    r.is_percent = true;
    return r;
  }
  auto bytes = parse_size(text);
  if (!bytes) return std::nullopt;
  size_or_percent r;
  r.bytes = *bytes;
  return r;
}

std::string format_bytes(std::uint64_t bytes) {
  static constexpr const char* k_names[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes);
  int unit = 0;
  while (v >= 1024 && unit < 6) {
    v /= 1024;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf,
                v >= 100  ? "%.0f %s"
                : v >= 10 ? "%.1f %s"
                          : "%.2f %s",
                v, k_names[unit]);
  return buf;
}

std::optional<std::uint64_t> parse_duration_ns(std::string_view text) {
  double value = 0;
  std::string_view suffix;
  if (!split_number(text, value, suffix)) return std::nullopt;
  double scale = 0;
  if (suffix.empty() || iequals(suffix, "s"))
    scale = 1e9;
  else if (iequals(suffix, "ms"))
    scale = 1e6;
  else if (iequals(suffix, "us"))
    scale = 1e3;
  else if (iequals(suffix, "ns"))
    scale = 1;
  else if (iequals(suffix, "m") || iequals(suffix, "min"))
    scale = 60e9;
  else if (iequals(suffix, "h"))
    scale = 3600e9;
  else if (iequals(suffix, "d"))
    scale = 86400e9;
  else
    return std::nullopt;
  double ns = value * scale;
  if (ns >= 18446744073709551615.0) return std::nullopt;
  return static_cast<std::uint64_t>(ns);
}

std::string format_duration_ns(std::uint64_t ns) {
  char buf[48];
  double v = static_cast<double>(ns);
  if (ns < 1000)
    std::snprintf(buf, sizeof buf, "%llu ns", static_cast<unsigned long long>(ns));
  else if (ns < 1000000)
    std::snprintf(buf, sizeof buf, "%.1f us", v / 1e3);
  else if (ns < 1000000000)
    std::snprintf(buf, sizeof buf, "%.2f ms", v / 1e6);
  else if (ns < 60ull * 1000000000)
    std::snprintf(buf, sizeof buf, "%.1f s", v / 1e9);
  else {
    unsigned long long s = ns / 1000000000ull;
    if (s < 3600)
      std::snprintf(buf, sizeof buf, "%llum%02llus", s / 60, s % 60);
    else
      std::snprintf(buf, sizeof buf, "%lluh%02llum", s / 3600, (s % 3600) / 60);
  }
  return buf;
}

} // namespace gmem
