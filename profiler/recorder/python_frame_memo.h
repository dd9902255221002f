// Each thread's memo of the Python frames its captures met: a frame's tagged word
// (layout::python_word: its "file\0function" string id and line), keyed by where the frame
// lives and what it runs. The frames of one thread live on its interpreter's frame stack (3.11+;
// 3.10 reuses freed frame objects), so a call site reached again from the same callers finds
// its frames at the same addresses, suspended at the same instructions, whatever the depth it
// is reached at and whatever other sites were captured in between: a training step allocates
// from a few hundred lines, one after another, and their captures share most outer frames.
//
// A word is reused only when the frame's address, its code object, that code's line table and
// the instruction are all the same (a frame holds its code object, so a live code object at
// that address is the one seen; a code object that died and left its address to another one
// leaves another line table there). Direct-mapped by (frame, instruction); a later frame that
// maps to the same entry replaces it. Entries belong to one string table (the ids are its):
// use() with another table empties the memo.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gmem::trace {

class python_frame_memo {
public:
  static constexpr unsigned k_bits = 10;
  static constexpr std::size_t k_entries = std::size_t{1} << k_bits;
  struct key {
    const void* frame = nullptr;
    const void* code = nullptr;
    const void* linetable = nullptr;
    std::intptr_t instr = 0; // the frame's own record of its instruction (f_lasti or a pointer)
    bool operator==(const key&) const = default;
  };

  // The calling thread's memo, made at its first capture and freed at its exit; nullptr when
  // there is no memory for one (captures then go without).
  static python_frame_memo* mine() noexcept;

  // Entries are the string table `ctx`'s from now on (emptied if they were another's).
  void use(const void* ctx) noexcept {
    if (ctx != ctx_) {
      clear();
      ctx_ = ctx;
    }
  }
  // The word of a frame met before with this key; 0 when none.
  std::uint64_t find(const key& k) const noexcept {
    const entry& e = entries_[index(k)];
    return e.k == k ? e.word : 0;
  }
  // Remembers `word` (non-zero) for the frame `k`, in place of the entry at its index.
  void store(const key& k, std::uint64_t word) noexcept { entries_[index(k)] = {k, word}; }
  void clear() noexcept;

  static std::size_t index(const key& k) noexcept {
    const auto f = reinterpret_cast<std::uintptr_t>(k.frame);
    const auto i = static_cast<std::uint64_t>(k.instr);
    return static_cast<std::size_t>(((f ^ (i * 0x9E3779B97F4A7C15ull)) * 0xff51afd7ed558ccdull) >>
                                    (64 - k_bits));
  }

private:
  struct entry {
    key k;
    std::uint64_t word = 0;
  };
  const void* ctx_ = nullptr;
  entry entries_[k_entries];
};

} // namespace gmem::trace
