// How show_stack() shows two kinds of frames that are not the program's line: PyTorch's
// allocator internals, which every observed tensor's stack runs through (folded from every
// view but --all-frames), and Python frames lent by a thread that waited in backward() while
// an autograd engine thread allocated (the first one shown marked "[via backward()]", in the
// text, the JSON and the site's identity).
#include <unistd.h>

#include <gtest/gtest.h>

#include "profiler/format/module_map.h"
#include "tests/tools/sample_trace.h"
#include "tools/analysis/leak_report.h"
#include "tools/analysis/trace_facts.h"
#include "tools/render/json_output.h"
#include "tools/render/printers.h"
#include "tools/stack_view.h"

// Functions of this test binary named as PyTorch's (symbolized from its own symbol table).
// noipa and distinct bodies: no two folded into one symbol.
namespace c10::cuda::CUDACachingAllocator::Native {
struct DeviceCachingAllocator {
  __attribute__((noipa)) static void record_trace(int) { asm volatile("nop"); }
  __attribute__((noipa)) static void alloc_block(int) { asm volatile("nop\n nop"); }
  __attribute__((noipa)) static void malloc(int) { asm volatile("nop\n nop\n nop"); }
};
} // namespace c10::cuda::CUDACachingAllocator::Native
namespace c10::cuda {
__attribute__((noipa)) void cudaMallocMaybeCapturing(void**, unsigned long) {
  asm volatile("nop\n nop\n nop\n nop");
}
} // namespace c10::cuda

namespace gmem::tools {
namespace {

using gmem::trace::python_lender;
using gmem::trace::python_note;

__attribute__((noipa)) void user_training_step() {
  asm volatile("nop\n nop\n nop\n nop\n nop");
}

// This test binary as a module of the trace, so its functions resolve by name.
gmem::trace::module self_module() {
  const auto here = reinterpret_cast<std::uintptr_t>(&user_training_step);
  for (const auto& m : gmem::trace::scan_modules()) {
    if (here < m.start || here >= m.start + m.size) continue;
    gmem::trace::module out;
    char path[4096];
    const auto n = readlink("/proc/self/exe", path, sizeof path - 1);
    out.path = m.path.empty() && n > 0 ? std::string(path, static_cast<std::size_t>(n)) : m.path;
    out.load_bias = m.load_bias;
    out.start = m.start;
    out.size = m.size;
    for (const unsigned char c : m.build_id) {
      char b[3];
      std::snprintf(b, sizeof b, "%02x", c);
      out.build_id += b;
    }
    return out;
  }
  return {};
}

std::uintptr_t ip(void (*fn)(int)) {
  return reinterpret_cast<std::uintptr_t>(fn) + 1; // inside it (resolve() looks up ip - 1)
}

std::vector<std::string> names(const std::vector<frame_info>& frames) {
  std::vector<std::string> out;
  for (const auto& f : frames) {
    const std::string n = f.name();
    if (f.python)
      out.push_back(n + "@" + f.location());
    else // without the parameter list
      out.push_back(n.ends_with(")") ? n.substr(0, n.rfind('(')) : n);
  }
  return out;
}

TEST(stack_view, pytorchs_allocator_frames_are_folded_from_every_view) {
  using c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator;
  auto t = testing::sample_trace();
  t.modules = {self_module()};
  ASSERT_FALSE(t.modules[0].path.empty());
  // A tensor's stack as the tracker records it: the allocator's frames, then the caller's.
  t.stacks[1] = {ip(&DeviceCachingAllocator::record_trace),
                 ip(&DeviceCachingAllocator::alloc_block), ip(&DeviceCachingAllocator::malloc),
                 reinterpret_cast<std::uintptr_t>(&c10::cuda::cudaMallocMaybeCapturing) + 1,
                 reinterpret_cast<std::uintptr_t>(&user_training_step) + 1};
  t.python_locations[10] = {"/home/user/train.py", "train"};
  t.stacks[2] = t.stacks[1];
  t.python_stacks[2] = {{{10, 12}}, python_note::none};
  symbolizer symbols(module_ranges(t));
  const std::string user = "gmem::tools::(anonymous namespace)::user_training_step";
  for (const frame_view v : {frame_view::python_first, frame_view::mixed, frame_view::native}) {
    const auto s = show_stack(t, 1, symbols, v);
    EXPECT_EQ(names(s.frames), std::vector<std::string>{user}) << static_cast<int>(v);
    EXPECT_EQ(s.folded, 4u) << static_cast<int>(v);
  }
  const auto py = show_stack(t, 2, symbols, frame_view::mixed);
  EXPECT_EQ(names(py.frames), (std::vector<std::string>{"train@train.py:12", user}));
  const auto all = show_stack(t, 1, symbols, frame_view::all);
  ASSERT_EQ(all.frames.size(), 5u);
  EXPECT_EQ(names(all.frames)[0],
            "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::record_trace");
}

// A gradient allocated on pt_autograd_0 while train() waited in loss.backward() at line 12:
// torch's backward() frames (lent too) fold, the mark lands on the program's line.
gmem::trace::trace backward_trace() {
  auto t = testing::sample_trace();
  t.modules.clear();
  const std::string torch = "/usr/lib/python3/dist-packages/torch/";
  t.python_locations[10] = {"/home/user/train.py", "train"};
  t.python_locations[11] = {"/home/user/train.py", "<module>"};
  t.python_locations[12] = {torch + "autograd/__init__.py", "backward"};
  t.python_locations[13] = {torch + "_tensor.py", "Tensor.backward"};
  t.python_locations[14] = {"/home/user/fn.py", "Scale.backward"};
  gmem::trace::python_stack lent{{{12, 347}, {13, 626}, {10, 12}, {11, 30}}, python_note::none};
  lent.lender = python_lender::backward;
  lent.lent_from = 0;
  lent.waiting = 1;
  // Stacks 101-103: Python frames only (native frames are the other test's).
  t.python_stacks[101] = lent;
  // The same line's own allocation (the loss itself): not lent, another site.
  t.python_stacks[102] = {{{10, 12}, {11, 30}}, python_note::none};
  // A custom autograd Function's Python backward, run by the engine thread: its own frame first.
  auto own = lent;
  own.frames.insert(own.frames.begin(), {14, 5});
  own.lent_from = 1;
  own.waiting = 3; // three Python threads were in backward(): the latest one's frames
  t.python_stacks[103] = own;
  return t;
}

TEST(stack_view, frames_lent_by_backward_are_marked_on_the_programs_line) {
  const auto t = backward_trace();
  symbolizer symbols(module_ranges(t));
  const auto s = show_stack(t, 101, symbols, frame_view::python_first);
  EXPECT_EQ(names(s.frames), (std::vector<std::string>{"train [via backward()]@train.py:12",
                                                       "<module>@train.py:30"}));
  EXPECT_EQ(s.python_folded, 2u);
  EXPECT_EQ(s.frames[0].function, "train");
  EXPECT_EQ(s.frames[0].via, "backward()");
  EXPECT_TRUE(s.frames[1].via.empty());
  EXPECT_EQ(frame_json(s.frames[0])["via"], "backward()");
  EXPECT_EQ(frame_json(s.frames[0])["function"], "train");
  EXPECT_FALSE(frame_json(s.frames[1]).contains("via"));
  // --all-frames: nothing folded, the mark on the first lent frame, torch's.
  const auto all = show_stack(t, 101, symbols, frame_view::all);
  EXPECT_EQ(all.frames[0].via, "backward()");
  EXPECT_EQ(all.frames[0].function, "backward");
  // Lent or not is part of the site.
  EXPECT_NE(stack_key(s), stack_key(show_stack(t, 102, symbols, frame_view::python_first)));
  const auto own = show_stack(t, 103, symbols, frame_view::python_first);
  EXPECT_EQ(names(own.frames),
            (std::vector<std::string>{
                "Scale.backward@fn.py:5",
                "train [via backward(), the latest of 3 threads waiting]@train.py:12",
                "<module>@train.py:30"}));
  // Suppressions see the frames as they are, unmarked.
  for (const auto& f : all_frames(t, 101, symbols))
    EXPECT_TRUE(f.via.empty());
}

TEST(stack_view, the_leak_text_says_what_the_mark_means) {
  auto t = backward_trace();
  t.live.resize(1);
  t.live[0].stack_id = 101;
  symbolizer symbols(module_ranges(t));
  leak_filter f;
  f.verdicts = leak_filter::show::all;
  const auto r = build_leak_report(t, symbols, f);
  const std::string text = print_leaks(t, r, {});
  EXPECT_NE(text.find("#0  train [via backward()] at train.py:12 (python)"), std::string::npos)
      << text;
  EXPECT_NE(text.find(k_lent_note), std::string::npos) << text;
  EXPECT_EQ(leaks_json(t, r)["sites"][0]["frames"][0]["via"], "backward()");
}

} // namespace
} // namespace gmem::tools
