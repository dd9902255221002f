// Python frames in the tools: what a stack shows (Python first, internals folded), how sites
// group, suppressions (patterns, files, the default list), and the text, JSON and PyTorch
// export of Python frames (golden: tests/tools/golden/python_leaks.txt).
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <gtest/gtest.h>

#include "tests/tools/sample_trace.h"
#include "tools/analysis/call_sites.h"
#include "tools/analysis/leak_report.h"
#include "tools/analysis/suppressions.h"
#include "tools/analysis/trace_facts.h"
#include "tools/export/chrome_export.h"
#include "tools/export/pytorch_export.h"
#include "tools/render/json_output.h"
#include "tools/render/printers.h"
#include "tools/stack_view.h"

namespace gmem::tools {
namespace {

using namespace testing;
using gmem::trace::python_frame;
using gmem::trace::python_note;

constexpr std::uintptr_t k_gmem = 0x100000000, k_model = 0x200000000, k_python = 0x300000000,
                         k_cublas = 0x400000000, k_cudart = 0x500000000;

void add_module(gmem::trace::trace& t, const std::string& path, std::uintptr_t start) {
  gmem::trace::module m;
  m.path = path;
  m.load_bias = start;
  m.start = start;
  m.size = 0x100000;
  t.modules.push_back(m);
}

// sample_trace() with Python stacks: stack 1 (4 x 250 KiB) and stack 5 (same Python frames,
// another native path) from train.py:88 in step; stack 2 (8 MiB) a cuBLAS workspace from
// model.py:42; stack 3 (1 MiB) from a thread without the GIL.
gmem::trace::trace python_trace() {
  auto t = sample_trace();
  t.modules.clear();
  add_module(t, "/opt/gmem/lib/libgmem.so", k_gmem);
  add_module(t, "/opt/app/libmodel.so", k_model);
  add_module(t, "/usr/lib/libpython3.12.so.1.0", k_python);
  add_module(t, "/usr/lib/libcublas.so.12", k_cublas);
  add_module(t, "/usr/lib/libcudart.so.12", k_cudart);
  t.python_locations[10] = {"/app/train.py", "Trainer.step"};
  t.python_locations[11] = {"/app/train.py", "<module>"};
  t.python_locations[12] = {"/app/model.py", "Model.forward"};
  t.stacks[1] = {k_gmem + 0x10, k_cudart + 0x20, k_model + 0x1010, k_python + 0x30,
                 k_python + 0x40};
  t.stacks[5] = {k_gmem + 0x10, k_cudart + 0x20, k_model + 0x2020, k_python + 0x30};
  t.python_stacks[1] = {{{10, 88}, {11, 120}}, python_note::none};
  t.python_stacks[5] = t.python_stacks[1];
  t.stacks[2] = {k_gmem + 0x10, k_cublas + 0x50, k_model + 0x3030, k_python + 0x30};
  t.python_stacks[2] = {{{12, 42}, {10, 90}, {11, 120}}, python_note::none};
  t.stacks[3] = {k_gmem + 0x10, k_model + 0x4040};
  t.python_stacks[3] = {{}, python_note::no_gil};
  // Half of stack 1's allocations come through stack 5: one Python call site.
  t.live[2].stack_id = 5;
  t.live[3].stack_id = 5;
  return t;
}

std::vector<std::string> names(const std::vector<frame_info>& frames) {
  std::vector<std::string> out;
  for (const auto& f : frames)
    out.push_back(f.python ? f.function + "@" + f.location() : f.name());
  return out;
}

TEST(stack_view, python_first_then_the_programs_native_frame) {
  const auto t = python_trace();
  symbolizer symbols(module_ranges(t));
  const auto s = show_stack(t, 1, symbols, frame_view::python_first);
  EXPECT_EQ(names(s.frames),
            (std::vector<std::string>{"Trainer.step@train.py:88", "<module>@train.py:120",
                                      "libmodel.so+0x1010"}));
  EXPECT_EQ(s.python_frames, 2u);
  EXPECT_EQ(s.folded, 3u); // libcudart, two libpython frames (the shim's is not counted)
  const auto native = show_stack(t, 1, symbols, frame_view::native);
  EXPECT_EQ(names(native.frames), (std::vector<std::string>{"libmodel.so+0x1010"}));
  const auto all = show_stack(t, 1, symbols, frame_view::all);
  EXPECT_EQ(all.frames.size(), 6u); // 2 Python + 4 native (libgmem.so's hidden)
  EXPECT_EQ(all.folded, 0u);
  const auto no_gil = show_stack(t, 3, symbols, frame_view::python_first);
  EXPECT_EQ(no_gil.note, python_note::no_gil);
  EXPECT_EQ(names(no_gil.frames), (std::vector<std::string>{"libmodel.so+0x4040"}));
  EXPECT_EQ(stack_key(show_stack(t, 1, symbols, frame_view::python_first)),
            stack_key(show_stack(t, 5, symbols, frame_view::python_first)));
  EXPECT_NE(stack_key(show_stack(t, 1, symbols, frame_view::native)),
            stack_key(show_stack(t, 5, symbols, frame_view::native)));
}

TEST(stack_view, frame_classes) {
  frame_info f;
  f.function = "libcudart_static_4d8b33a106dceb3c51ff7c4b5ab2f5ac0f0d4d2a";
  f.module = "/app/voxelize";
  EXPECT_TRUE(is_runtime_internal(f));
  f.function = "cudaMalloc";
  EXPECT_TRUE(is_cuda_api(f));
  f.function = "voxelize(int)";
  EXPECT_FALSE(is_runtime_internal(f));
  EXPECT_FALSE(is_glue_frame(f));
  f.function = "_PyEval_EvalFrameDefault";
  f.module = "/usr/bin/python3.12";
  EXPECT_TRUE(is_glue_frame(f));
  f.function = "pybind11::cpp_function::dispatcher(_object*, _object*, _object*)";
  f.module = "/lib/libtorch_python.so";
  EXPECT_TRUE(is_glue_frame(f));
  f.function = "start_thread";
  f.module = "/lib/x86_64-linux-gnu/libc.so.6";
  EXPECT_TRUE(is_glue_frame(f));
  f.function.clear(); // Ubuntu's libc has no symbols for its start code: still libc's start
  EXPECT_TRUE(is_glue_frame(f));
  f.function = "qsort";
  EXPECT_FALSE(is_glue_frame(f));
  f.function = "_PyEval_EvalFrameDefault";
  f.python = true;
  EXPECT_FALSE(is_glue_frame(f)); // a Python frame is never folded
  // PyTorch's allocator internals, which every observed tensor's stack starts with.
  f.python = false;
  f.module = "/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so";
  for (const char* fn :
       {"c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::record_trace("
        "c10::CachingDeviceAllocator::TraceEntry::Action, unsigned long)",
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::alloc_block()",
        "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, "
        "unsigned long, CUstream_st*)",
        "c10::cuda::cudaMallocMaybeCapturing(void**, unsigned long)"}) {
    f.function = fn;
    EXPECT_TRUE(is_allocator_internal(f)) << fn;
  }
  // CuPy's memory pool (cupy.cuda.memory, compiled by Cython), not the rest of CuPy.
  f.module = "/venv/lib/python3.12/site-packages/cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so";
  f.function = "__pyx_f_4cupy_4cuda_6memory_22SingleDeviceMemoryPool_malloc("
               "__pyx_obj_4cupy_4cuda_6memory_SingleDeviceMemoryPool*, unsigned long, int) "
               "[clone .constprop.306]";
  EXPECT_TRUE(is_allocator_internal(f));
  f.function = "__pyx_pw_4cupy_5_core_4core_7ndarray_1__init__";
  EXPECT_FALSE(is_allocator_internal(f));
  f.function = "at::native::empty_cuda(c10::ArrayRef<long>)";
  f.module = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so";
  EXPECT_FALSE(is_allocator_internal(f));
  f.function = "c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc()";
  f.python = true;
  EXPECT_FALSE(is_allocator_internal(f));
}

// A one-line site names the program's Python line and its Python callers: the native frame
// shown after them is where the allocation went in, never the outermost line's caller.
TEST(leak_report, a_python_site_has_no_native_caller) {
  std::vector<frame_info> f(3);
  f[0].python = f[1].python = true;
  f[0].function = "step";
  f[0].file = "/src/train.py";
  f[0].line = 15;
  f[1].function = "<module>";
  f[1].file = "/src/train.py";
  f[1].line = 21;
  f[2].function = "at::native::empty_cuda(c10::ArrayRef<long>)";
  f[2].module = "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so";
  EXPECT_EQ(site_summary(f, 3), "step at train.py:15  <  <module> at train.py:21");
  f.erase(f.begin()); // a module-level line
  EXPECT_EQ(site_summary(f, 3), "<module> at train.py:21");
  std::string caller = "stale";
  EXPECT_EQ(site_label(f, &caller), "<module> at train.py:21");
  EXPECT_EQ(caller, "");
  f[1].python = true; // a Python caller is a caller
  (void)site_label(f, &caller);
  EXPECT_NE(caller, "");
  std::reverse(f.begin(), f.end()); // native first (--native): its callers are shown
  f[0].python = false;
  EXPECT_EQ(site_summary(f, 2), f[0].name() + "  <  <module> at train.py:21");
}

TEST(leak_report, python_sites_group_by_python_stack_and_suppressions_go_apart) {
  const auto t = python_trace();
  symbolizer symbols(module_ranges(t));
  const auto supp = suppression_list::defaults();
  leak_filter f;
  f.suppressions = &supp;
  f.verdicts = leak_filter::show::all; // grouping, whatever the verdicts
  const leak_report r = build_leak_report(t, symbols, f);
  ASSERT_TRUE(r.is_valid());
  ASSERT_EQ(r.sites.size(), 2u);
  EXPECT_EQ(r.sites[0].count, 1u); // the no-GIL 1 MiB
  EXPECT_EQ(r.sites[0].note, python_note::no_gil);
  EXPECT_EQ(r.sites[1].count, 4u); // stacks 1 and 5: one Python call site
  EXPECT_EQ(r.sites[1].frames[0].function, "Trainer.step");
  ASSERT_EQ(r.suppressed.size(), 1u);
  EXPECT_EQ(r.suppressed[0].bytes, 8u << 20);
  EXPECT_EQ(r.suppressed[0].suppressed_by, "leak:libcublas (default:2)");
  EXPECT_EQ(r.suppressed_bytes, 8u << 20);
  const std::string out = print_leaks(t, r, {});
  EXPECT_EQ(out, golden("python_leaks.txt", out));
  const auto j = leaks_json(t, r);
  EXPECT_EQ(j["sites"][1]["frames"][0]["python"], true);
  EXPECT_EQ(j["sites"][1]["frames"][0]["file"], "/app/train.py");
  EXPECT_EQ(j["sites"][1]["frames"][0]["line"], 88);
  EXPECT_EQ(j["suppressed"][0]["suppressed_by"], "leak:libcublas (default:2)");
  // Without suppressions the workspace is a leak like any other.
  leak_filter all;
  all.verdicts = leak_filter::show::all;
  const leak_report plain = build_leak_report(t, symbols, all);
  EXPECT_EQ(plain.sites.size(), 3u);
  EXPECT_TRUE(plain.suppressed.empty());
}

const py_value& field(const py_value& v, const std::string& key) {
  for (const auto& [k, x] : *std::get<std::shared_ptr<py_dict>>(v.get()))
    if (k == key) return x;
  static const py_value none;
  ADD_FAILURE() << "no key " << key;
  return none;
}
const py_list& items(const py_value& v) {
  return *std::get<std::shared_ptr<py_list>>(v.get());
}

TEST(pytorch_export, python_frames_come_first_like_pytorchs_own) {
  const auto t = python_trace();
  symbolizer symbols(module_ranges(t));
  const py_value snap = pytorch_snapshot(t, symbols);
  const auto& segs = items(field(snap, "segments"));
  ASSERT_EQ(segs.size(), 3u);
  const auto& blocks = items(field(segs[1], "blocks"));
  ASSERT_FALSE(blocks.empty());
  const auto& frames = items(field(blocks[0], "frames")); // the 8 MiB block: stack 2
  ASSERT_GE(frames.size(), 4u);
  EXPECT_EQ(std::get<std::string>(field(frames[0], "filename").get()), "/app/model.py");
  EXPECT_EQ(std::get<std::string>(field(frames[0], "name").get()), "Model.forward");
  EXPECT_EQ(std::get<std::int64_t>(field(frames[0], "line").get()), 42);
  EXPECT_EQ(std::get<std::string>(field(frames[3], "name").get()), "libcublas.so.12+0x50");
}

TEST(chrome_export, allocations_name_their_mixed_stack) {
  const auto t = python_trace();
  symbolizer symbols(module_ranges(t));
  const auto j = chrome_trace(t, symbols);
  const auto& frames = j["stackFrames"];
  std::size_t allocs = 0, named = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("cat", "") != "alloc") continue;
    ++allocs;
    if (!e.contains("sf")) continue;
    // Walk from the innermost node to the root: Python frames are the callers' side.
    std::vector<std::string> chain;
    for (std::string id = e["sf"]; !id.empty();) {
      const auto& node = frames.at(id);
      chain.push_back(node["name"]);
      id = node.contains("parent") ? node["parent"].get<std::string>() : "";
    }
    if (std::find(chain.begin(), chain.end(), "Trainer.step (train.py:88)") != chain.end()) ++named;
  }
  EXPECT_GT(allocs, 0u);
  EXPECT_GT(named, 0u);
}

TEST(suppressions, patterns) {
  EXPECT_TRUE(pattern_matches("cublas", "/usr/lib/libcublasLt.so.12"));
  EXPECT_TRUE(pattern_matches("^/usr/lib/", "/usr/lib/libcublasLt.so.12"));
  EXPECT_FALSE(pattern_matches("^lib", "/usr/lib/libcublasLt.so.12"));
  EXPECT_TRUE(pattern_matches("so.12$", "/usr/lib/libcublasLt.so.12"));
  EXPECT_FALSE(pattern_matches("so$", "/usr/lib/libcublasLt.so.12"));
  EXPECT_TRUE(pattern_matches("at::*Handle", "at::cuda::getCurrentCUDABlasHandle()"));
  EXPECT_TRUE(pattern_matches("^Cache.grow$", "Cache.grow"));
  EXPECT_FALSE(pattern_matches("^Cache.grow$", "Cache.grow2"));
  EXPECT_FALSE(pattern_matches("", "anything"));
}

TEST(suppressions, parse_errors_name_the_line) {
  std::string error;
  auto ok = suppression_list::parse("# c\n\n  leak:foo  \nleak:bar*baz\n", "f", &error);
  ASSERT_TRUE(ok) << error;
  ASSERT_EQ(ok->entries().size(), 2u);
  EXPECT_EQ(ok->entries()[0].pattern, "foo");
  EXPECT_EQ(ok->entries()[1].origin, "f:4");
  EXPECT_FALSE(suppression_list::parse("leak:a\nfoo\n", "f", &error));
  EXPECT_EQ(error,
            "f:2: expected 'leak:PATTERN' or 'leak.KIND:PATTERN' (or a # comment), found 'foo'");
  EXPECT_FALSE(suppression_list::parse("leak:**", "f", &error));
  EXPECT_EQ(error, "f:1: empty pattern (it would suppress every leak)");
  EXPECT_FALSE(suppression_list::parse("leak:^$", "f", &error));
}

// leak.KIND:PATTERN suppresses only allocations of that kind: XLA's pinned host staging
// buffer, allocated under JAX's pxla.py, is suppressed by default, a device array kept from
// the same Python code is not.
TEST(suppressions, a_kind_qualified_pattern_matches_only_that_kind) {
  std::string error;
  auto list = suppression_list::parse("leak.host_pinned:pxla.py\n", "f", &error);
  ASSERT_TRUE(list) << error;
  ASSERT_EQ(list->entries().size(), 1u);
  EXPECT_EQ(list->entries()[0].kind, "host_pinned");
  frame_info f;
  f.python = true;
  f.function = "batched_device_put";
  f.file = "/venv/lib/python3.12/site-packages/jax/_src/interpreters/pxla.py";
  EXPECT_NE(list->match({f}, "host_pinned"), nullptr);
  EXPECT_EQ(list->match({f}, "vmm"), nullptr);
  EXPECT_EQ(list->match({f}), nullptr);
  const auto defaults = suppression_list::defaults();
  EXPECT_NE(defaults.match({f}, "host_pinned"), nullptr);
  EXPECT_EQ(defaults.match({f}, "device"), nullptr);
  EXPECT_FALSE(suppression_list::parse("leak.pinned:x\n", "f", &error));
  EXPECT_NE(error.find("f:1: unknown allocation kind 'pinned'"), std::string::npos) << error;
  EXPECT_FALSE(suppression_list::parse("leak.device:\n", "f", &error));
  EXPECT_EQ(error, "f:1: empty pattern (it would suppress every leak)");
}

TEST(suppressions, files_are_regular_and_small) {
  const std::string dir = ::testing::TempDir() + "supp." + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  std::string error;
  EXPECT_FALSE(suppression_list::load(dir + "/missing", &error));
  EXPECT_NE(error.find("cannot open suppressions file"), std::string::npos) << error;
  ASSERT_EQ(mkfifo((dir + "/fifo").c_str(), 0600), 0);
  EXPECT_FALSE(suppression_list::load(dir + "/fifo", &error)); // not waited on
  EXPECT_NE(error.find("not a regular file"), std::string::npos) << error;
  {
    std::ofstream(dir + "/big") << std::string((1 << 20) + 1, '#');
    std::ofstream(dir + "/good") << "leak:libmodel\n";
  }
  EXPECT_FALSE(suppression_list::load(dir + "/big", &error));
  EXPECT_NE(error.find("larger than 1 MiB"), std::string::npos) << error;
  auto good = suppression_list::load(dir + "/good", &error);
  ASSERT_TRUE(good) << error;
  EXPECT_EQ(good->entries()[0].origin, dir + "/good:1");
  for (const char* f : {"/fifo", "/big", "/good"})
    std::remove((dir + f).c_str());
  rmdir(dir.c_str());
}

} // namespace
} // namespace gmem::tools
