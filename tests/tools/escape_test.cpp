// The escaping cases of docs/security.md: bidirectional controls (U+202A..U+202E, U+2066..U+2069)
// escaped like control bytes, and the HTML report holding no raw control byte, invalid UTF-8 or
// bidirectional control from a trace (it kept 40 raw ESC/BEL/0xff bytes).
#include <gtest/gtest.h>

#include <string>

#include "common/escape.h"
#include "tests/tools/sample_trace.h"
#include "tools/analysis/trace_facts.h"
#include "tools/render/html_report.h"
#include "tools/render/json_output.h"
#include "tools/render/svg_charts.h"

namespace gmem::tools {
namespace {

using namespace testing;

// Any C0 control but \n, DEL, a byte that cannot be UTF-8 (0xfe, 0xff) or a bidirectional
// control's encoding (E2 80 AA..AE, E2 81 A6..A9).
std::size_t raw_bytes(const std::string& s) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if ((c < 0x20 && c != '\n') || c == 0x7f || c >= 0xfe) ++n;
    if (c == 0xe2 && i + 2 < s.size()) {
      const auto b = static_cast<unsigned char>(s[i + 1]);
      const auto d = static_cast<unsigned char>(s[i + 2]);
      if ((b == 0x80 && d >= 0xaa && d <= 0xae) || (b == 0x81 && d >= 0xa6 && d <= 0xa9)) ++n;
    }
  }
  return n;
}

TEST(escape_text, bidirectional_controls_become_visible) {
  EXPECT_EQ(escape_text("gmem.\xe2\x80\xae"
                        "4321"),
            "gmem.\\u202e4321"); // RLO
  for (const char* cp :
       {"\xe2\x80\xaa", "\xe2\x80\xab", "\xe2\x80\xac", "\xe2\x80\xad", "\xe2\x80\xae",
        "\xe2\x81\xa6", "\xe2\x81\xa7", "\xe2\x81\xa8", "\xe2\x81\xa9"})
    EXPECT_EQ(raw_bytes(escape_text(cp)), 0u) << escape_text(cp);
  EXPECT_EQ(escape_text("\xe2\x81\xa9"), "\\u2069");
  // Neighbours stay: U+2029 (paragraph separator) is not a control we escape, U+2070 neither.
  EXPECT_EQ(escape_text("\xe2\x80\xa9\xe2\x81\xb0"), "\xe2\x80\xa9\xe2\x81\xb0");
}

TEST(escape_bidi_in_json, the_same_document_without_raw_bidi_controls) {
  nlohmann::json j = {{"command", "./\xe2\x80\xaegnp.exe \xe2\x81\xa9 caf\xc3\xa9"}};
  const std::string text = dump_json(j, -1);
  EXPECT_EQ(raw_bytes(text), 0u) << text;
  EXPECT_EQ(text, "{\"command\":\"./\\u202egnp.exe \\u2069 caf\xc3\xa9\"}");
  EXPECT_EQ(nlohmann::json::parse(text), j); // the same document
}

TEST(html_escape, escapes_like_the_terminal_then_markup) {
  EXPECT_EQ(html_escape("<b>\x1b[2J\x07\xff\xe2\x80\xae&\"</b>"),
            "&lt;b&gt;\\x1b[2J\\x07\\xff\\u202e&amp;&quot;&lt;/b&gt;");
  EXPECT_EQ(html_escape("frame 1\nframe 2"), "frame 1\nframe 2"); // a stack's lines stay lines
}

TEST(html_report, no_raw_control_invalid_or_bidi_bytes_from_a_trace) {
  auto t = sample_trace();
  t.info.command_line = "./app \x1b]0;owned\x07\x1b[2J\xff \xe2\x80\xaegnp.exe\xe2\x81\xa6";
  t.info.argv = {t.info.command_line};
  t.info.source = "shm gmem.\xe2\x80\xae\x1b[31m";
  t.modules[0].path = "/opt/\x1b[1m\xfflib\xe2\x80\xae.so";
  symbolizer symbols(module_ranges(t));
  const std::string h = html_report(t, symbols);
  EXPECT_EQ(raw_bytes(h), 0u);
  EXPECT_NE(h.find("\\x1b]0;owned\\x07\\x1b[2J\\xff \\u202egnp.exe\\u2066"), std::string::npos);
}

} // namespace
} // namespace gmem::tools
