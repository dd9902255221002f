// Text from a trace (command lines, symbols, paths, markers, option values) is written by the
// traced program, which may belong to another user. Before it reaches a terminal it goes
// through escape_text(): no byte of it can move the cursor, set a title or clear a screen.
#pragma once

#include <string>
#include <string_view>

namespace gmem {

// Printable text for one field: valid UTF-8 passes (non-ASCII letters stay readable); control
// bytes (C0, DEL, and the C1 range U+0080..U+009F) become "\n", "\t", "\r", "\x1b" or
// "\u009b"; the bidirectional controls U+202A..U+202E and U+2066..U+2069 (which reorder what
// follows them on screen) become "\u202e" and so on; bytes that are not valid UTF-8 become
// "\xNN"; a backslash becomes "\\", so the result is unambiguous. The result holds no byte
// below 0x20, no 0x7f, no C1 control and no bidirectional control. Terminal output, the HTML
// report (html_escape()) and the exporter's labels all go through it.
std::string escape_text(std::string_view s);

// `s` with every byte sequence that is not valid UTF-8 replaced by U+FFFD, for formats that
// require UTF-8 (JSON, Python pickles). Control characters are kept (those formats escape them).
std::string valid_utf8(std::string_view s);

// JSON text (as nlohmann::json::dump() writes it) with every bidirectional control written as
// its JSON escape ("\u202e"): the same document, but one that no terminal or viewer reorders.
// Such characters can only occur inside JSON strings, where the escape means the same.
std::string escape_bidi_in_json(std::string_view json);

} // namespace gmem
