// Python frames lent to an engine's worker threads. PyTorch runs backward() for CUDA tensors on
// native threads of its autograd engine (named pt_autograd_<device>), which run no Python code
// of their own: a gradient allocated there would have no Python line. While a Python thread
// waits in the engine, gmem's bootstrap registers it (gmem_python_wait_begin, entered from
// Python): its Python frames are captured then, on its own thread (they cannot change while it
// is blocked in the engine), and kept here. A capture on a worker thread of that engine made
// while a thread is registered appends them after its own Python frames (none, or those of a
// Python hook or compiled backward it runs), behind a note word that marks where the lent
// frames begin (layout::python_word::lent_note; docs/trace-format.md, "Python frames").
//
// Which threads are workers: those whose name starts with the engine's prefix (pt_autograd_),
// read once per thread (prctl, no allocation) and cached in a thread-local. Not "any thread
// that allocates while a backward runs": a data loader's or another library's thread
// allocating at the same time would then be blamed on backward().
//
// Several threads waiting at once (backward() called from several Python threads): the engine's
// worker threads serve them all and nothing says for whom a node runs, so the latest waiter's
// frames are lent and the number of waiters is recorded beside them (readers say it).
// Reentrant backward (a worker thread running Python code that calls backward() again, as
// reentrant checkpointing does) registers the worker too; its own frames plus those lent to it
// at that moment become the frames it lends in turn.
//
// Invariants: a slot is owned by the thread that claimed it (claimed_) from begin() to end();
// only its owner writes it, under its seqlock (version_ odd while written); waiting_ counts
// claimed slots. A reader (lend) copies a slot only between two equal even versions.
// Cost: while no thread waits, one relaxed load (any()) per capture.
#pragma once

#include <atomic>
#include <cstdint>

#include "profiler/format/trace_layout.h"

namespace gmem::trace {

enum class wait_kind : std::uint8_t {
  backward = 1, // PyTorch's autograd engine: torch.autograd.graph._engine_run_backward
};

class waiting_frames {
public:
  static constexpr unsigned k_slots = 8;
  static constexpr unsigned k_max_words = layout::k_max_python_depth;

  // Registers the calling thread as waiting, with its Python frame words (as the writer `ctx`
  // interned them), innermost first. Returns a token for end(); 0 when nothing was registered
  // (no words, or every slot taken: captures then go without).
  std::uint32_t begin(wait_kind kind, const std::uint64_t* words, unsigned count,
                      const void* ctx) noexcept;
  void end(std::uint32_t token) noexcept;
  // Whether any thread is registered.
  bool any() const noexcept { return waiting_.load(std::memory_order_relaxed) != 0; }

  struct lent {
    unsigned words = 0;   // written to `out`
    unsigned waiting = 0; // threads registered when the words were read
    wait_kind kind = wait_kind::backward;
  };
  // Copies up to `max` words of the latest registered thread whose words belong to `ctx`.
  lent lend(std::uint64_t* out, unsigned max, const void* ctx) const noexcept;

private:
  struct slot {
    std::atomic<bool> claimed{false};
    std::atomic<std::uint64_t> version{0};
    std::atomic<std::uint64_t> order{0}; // when it was registered (1, 2, ...); 0 = free
    std::atomic<const void*> ctx{nullptr};
    std::atomic<std::uint32_t> count{0};
    std::atomic<std::uint8_t> kind{0};
    std::atomic<std::uint64_t> words[k_max_words] = {};
  };
  slot slots_[k_slots];
  std::atomic<std::uint32_t> waiting_{0};
  std::atomic<std::uint64_t> next_order_{0};
};

// The process's registry (the writer's captures and the bootstrap's entries share it), inline:
// a capture while nothing waits pays one load, no call.
extern waiting_frames g_process_waiting_frames;
inline waiting_frames& process_waiting_frames() noexcept {
  return g_process_waiting_frames;
}

// Whether the calling thread is a worker of `kind`'s engine: its name, read at its first call
// and cached for the thread's life (PyTorch names its threads before they run any work).
bool is_worker_thread(wait_kind kind) noexcept;
// The naming rule alone (for tests): "pt_autograd_0", "pt_autograd_12" for backward.
bool is_worker_name(wait_kind kind, const char* name) noexcept;

} // namespace gmem::trace
