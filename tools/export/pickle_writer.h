// A minimal Python pickle encoder (protocol 2) for the values PyTorch's memory snapshot uses:
// dicts with string keys, lists, str, int, bool, None and float. Used by `gmem export
// --format pytorch`; the output loads with Python's pickle and with the unpickler inside
// PyTorch's MemoryViz.js (which knows a subset of the opcodes: the ones emitted here).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace gmem::tools {

class py_value;
using py_list = std::vector<py_value>;
using py_dict = std::vector<std::pair<std::string, py_value>>; // keeps insertion order

// A Python value tree. Integers are kept as int64 or uint64 so device addresses above 2^63
// survive; the encoder picks the shortest opcode for each.
class py_value {
public:
  py_value() = default; // None
  py_value(std::nullptr_t) {}
  py_value(bool b) : v_(b) {}
  py_value(int i) : v_(std::int64_t{i}) {}
  py_value(long i) : v_(std::int64_t{i}) {}
  py_value(long long i) : v_(std::int64_t{i}) {}
  py_value(unsigned u) : v_(std::uint64_t{u}) {}
  py_value(unsigned long u) : v_(std::uint64_t{u}) {}
  py_value(unsigned long long u) : v_(std::uint64_t{u}) {}
  py_value(double d) : v_(d) {}
  py_value(const char* s) : v_(std::string(s)) {}
  py_value(std::string s) : v_(std::move(s)) {}
  py_value(py_list l) : v_(std::make_shared<py_list>(std::move(l))) {}
  py_value(py_dict d) : v_(std::make_shared<py_dict>(std::move(d))) {}

  using storage = std::variant<std::monostate, bool, std::int64_t, std::uint64_t, double,
                               std::string, std::shared_ptr<py_list>, std::shared_ptr<py_dict>>;
  const storage& get() const { return v_; }

private:
  storage v_;
};

// Encodes `root` as a complete pickle (PROTO 2 ... STOP).
std::string encode_pickle(const py_value& root);

} // namespace gmem::tools
