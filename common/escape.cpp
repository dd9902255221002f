#include "common/escape.h"

#include <cstdint>
#include <cstdio>

namespace gmem {
namespace {

// Length of the valid UTF-8 sequence at s[i] (1..4), or 0 when it is not one (overlong forms,
// surrogates and code points above U+10FFFF are not valid). ASCII counts as length 1.
std::size_t utf8_length(std::string_view s, std::size_t i, std::uint32_t* code_point) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    *code_point = b0;
    return 1;
  }
  std::size_t n = 0;
  std::uint32_t cp = 0, min = 0;
  if ((b0 & 0xe0) == 0xc0) {
    n = 2, cp = b0 & 0x1fu, min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    n = 3, cp = b0 & 0x0fu, min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    n = 4, cp = b0 & 0x07u, min = 0x10000;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  *code_point = cp;
  return n;
}

// Explicit bidirectional embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069):
// one of them makes a terminal, browser or dashboard show the rest of the line reversed or
// reordered, so a name can pose as another ("gmem.1234" shown for "gmem.4321").
bool is_bidi_control(std::uint32_t cp) {
  return (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

} // namespace

std::string escape_text(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  char buf[16];
  for (std::size_t i = 0; i < s.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_length(s, i, &cp);
    if (n == 0) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
      continue;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7f) {
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if ((cp >= 0x80 && cp <= 0x9f) || is_bidi_control(cp)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  return out;
}

std::string escape_bidi_in_json(std::string_view json) {
  std::string out;
  out.reserve(json.size());
  char buf[8];
  for (std::size_t i = 0; i < json.size();) {
    std::uint32_t cp = 0;
    const std::size_t n = utf8_length(json, i, &cp);
    if (n == 3 && is_bidi_control(cp)) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      out += buf;
    } else {
      out.append(json.substr(i, n == 0 ? 1 : n));
    }
    i += n == 0 ? 1 : n;
  }
  return out;
}

std::string valid_utf8(std::string_view s) {
  // Valid runs are copied whole (most strings are one run of ASCII): s[done, i) is valid and
  // not yet in `out`.
  std::string out;
  std::size_t done = 0;
  for (std::size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    std::uint32_t cp = 0;
    if (const std::size_t n = utf8_length(s, i, &cp); n != 0) {
      i += n;
      continue;
    }
    out.append(s.substr(done, i - done));
    out += "\xef\xbf\xbd"; // U+FFFD
    done = ++i;
  }
  if (done == 0) return std::string(s);
  out.append(s.substr(done));
  return out;
}

} // namespace gmem
