// Each thread's memo of the stacks it interned last, with their ids: a program allocates from a
// few call sites in turn (a training step's layers, a decoding loop's caches), and finding a
// stack here costs a compare with a copy this thread touched recently, where the intern table
// costs a compare with the copy in the trace, whose lines the program has evicted since.
// First the last stack found or stored, compared without hashing (a loop allocating from one
// call site); then, by the stack's hash (intern_table.h's hash_bytes, which the intern table
// takes as it is on a miss), one of k_stacks entries, direct-mapped. An entry holds one
// writer's id (writers are numbered, never reused: a writer made at a freed one's address must
// not get its ids) and a copy of the whole stack, so a hit is exact. Stacks longer than k_words
// are not remembered.
#pragma once

#include <cstdint>
#include <cstring>

namespace gmem::trace {

class stack_memo {
public:
  static constexpr unsigned k_words = 48; // the default depths' 33 words fit
  static constexpr unsigned k_stacks = 8;

  // The id of the last stack found or stored when it is `ips` in writer `writer`, else 0.
  std::uint32_t find_last(std::uint64_t writer, const std::uintptr_t* ips,
                          unsigned count) const noexcept {
    return matches(entries_[last_], writer, ips, count) ? entries_[last_].id : 0;
  }
  // The id of `ips` (hash_bytes `hash`) in writer `writer` when remembered, else 0.
  std::uint32_t find(std::uint64_t writer, std::uint64_t hash, const std::uintptr_t* ips,
                     unsigned count) noexcept {
    const unsigned i = index(hash);
    const entry& e = entries_[i];
    if (e.hash != hash || !matches(e, writer, ips, count)) return 0;
    last_ = i;
    return e.id;
  }
  // Remembers `ips` with its id (non-zero), in place of the entry at its hash's index.
  void store(std::uint64_t writer, std::uint64_t hash, const std::uintptr_t* ips, unsigned count,
             std::uint32_t id) noexcept {
    if (count == 0 || count > k_words || id == 0) return;
    const unsigned i = index(hash);
    entry& e = entries_[i];
    e.writer = writer;
    e.hash = hash;
    e.id = id;
    e.count = count;
    std::memcpy(e.ips, ips, std::size_t{count} * sizeof *ips);
    last_ = i;
  }
  static unsigned index(std::uint64_t hash) noexcept {
    return static_cast<unsigned>((hash * 0x9E3779B97F4A7C15ull) >> 61); // k_stacks = 2^3
  }

private:
  static_assert(k_stacks == 8);
  struct entry {
    std::uint64_t writer = 0; // 0 = empty
    std::uint64_t hash = 0;
    std::uint32_t id = 0;
    std::uint32_t count = 0;
    std::uintptr_t ips[k_words];
  };
  static bool matches(const entry& e, std::uint64_t writer, const std::uintptr_t* ips,
                      unsigned count) noexcept {
    return e.writer == writer && writer != 0 && e.count == count &&
           std::memcmp(e.ips, ips, std::size_t{count} * sizeof *ips) == 0;
  }
  unsigned last_ = 0;
  entry entries_[k_stacks] = {};
};

} // namespace gmem::trace
