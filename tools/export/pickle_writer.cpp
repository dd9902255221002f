#include "tools/export/pickle_writer.h"

#include <bit>
#include <cstring>

#include "common/escape.h"

namespace gmem::tools {
namespace {

// Opcodes of pickle protocol 2 (Lib/pickletools.py names).
constexpr char k_proto = '\x80', k_stop = '.', k_none = 'N', k_newtrue = '\x88',
               k_newfalse = '\x89', k_binint = 'J', k_binint1 = 'K', k_binint2 = 'M',
               k_long1 = '\x8a', k_binfloat = 'G', k_binunicode = 'X', k_empty_list = ']',
               k_empty_dict = '}', k_mark = '(', k_appends = 'e', k_setitems = 'u';
// pickle.py batches APPENDS/SETITEMS by 1000; the format allows any count.
constexpr std::size_t k_batch = 1000;

class encoder {
public:
  std::string out;

  void value(const py_value& v) {
    std::visit([this](const auto& x) { one(x); }, v.get());
  }

private:
  void one(std::monostate) { out += k_none; }
  void one(bool b) { out += b ? k_newtrue : k_newfalse; }
  void one(std::int64_t i) {
    if (i >= 0 && i < 256) {
      out += k_binint1;
      out += static_cast<char>(i);
    } else if (i >= 0 && i < 65536) {
      out += k_binint2;
      le(static_cast<std::uint64_t>(i), 2);
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      out += k_binint;
      le(static_cast<std::uint64_t>(static_cast<std::uint32_t>(static_cast<std::int32_t>(i))), 4);
    } else {
      long1(static_cast<std::uint64_t>(i), i < 0);
    }
  }
  void one(std::uint64_t u) {
    if (u <= static_cast<std::uint64_t>(INT64_MAX))
      one(static_cast<std::int64_t>(u));
    else
      long1(u, false);
  }
  void one(double d) {
    out += k_binfloat;
    const auto bits = std::bit_cast<std::uint64_t>(d);
    for (int shift = 56; shift >= 0; shift -= 8) // big-endian
      out += static_cast<char>((bits >> shift) & 0xff);
  }
  void one(const std::string& text) {
    // BINUNICODE must be UTF-8 or Python's unpickler fails: a command line or path from a
    // trace may hold any bytes.
    const std::string s = valid_utf8(text);
    out += k_binunicode;
    le(s.size(), 4);
    out += s;
  }
  void one(const std::shared_ptr<py_list>& l) {
    out += k_empty_list;
    for (std::size_t i = 0; i < l->size(); i += k_batch) {
      out += k_mark;
      for (std::size_t j = i; j < l->size() && j < i + k_batch; ++j)
        value((*l)[j]);
      out += k_appends;
    }
  }
  void one(const std::shared_ptr<py_dict>& d) {
    out += k_empty_dict;
    for (std::size_t i = 0; i < d->size(); i += k_batch) {
      out += k_mark;
      for (std::size_t j = i; j < d->size() && j < i + k_batch; ++j) {
        one((*d)[j].first);
        value((*d)[j].second);
      }
      out += k_setitems;
    }
  }
  // LONG1: little-endian two's complement, shortest form that keeps the sign.
  void long1(std::uint64_t bits, bool negative) {
    std::string bytes;
    for (int k = 0; k < 8; ++k)
      bytes += static_cast<char>((bits >> (8 * k)) & 0xff);
    const char fill = negative ? '\xff' : '\0';
    while (bytes.size() > 1 && bytes.back() == fill &&
           ((static_cast<unsigned char>(bytes[bytes.size() - 2]) & 0x80) != 0) == negative)
      bytes.pop_back();
    if (!negative && (static_cast<unsigned char>(bytes.back()) & 0x80) != 0) bytes += '\0';
    out += k_long1;
    out += static_cast<char>(bytes.size());
    out += bytes;
  }
  void le(std::uint64_t v, int n) {
    for (int k = 0; k < n; ++k)
      out += static_cast<char>((v >> (8 * k)) & 0xff);
  }
};

} // namespace

std::string encode_pickle(const py_value& root) {
  encoder e;
  e.out += k_proto;
  e.out += '\x02';
  e.value(root);
  e.out += k_stop;
  return std::move(e.out);
}

} // namespace gmem::tools
