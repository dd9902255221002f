// The readers and PyTorch, CuPy and JAX: a framework's caching allocator is named,
// not counted as leaks; library-lifetime allocations are suppressed by default; the
// frameworks' own Python frames fold so the program's line comes first. Golden files:
// tests/tools/golden/frameworks_*.txt.
#include <algorithm>

#include <gtest/gtest.h>

#include "tests/tools/sample_trace.h"
#include "tools/analysis/leak_report.h"
#include "tools/analysis/suppressions.h"
#include "tools/analysis/trace_facts.h"
#include "tools/commands/run_summary.h"
#include "tools/frameworks.h"
#include "tools/render/json_output.h"
#include "tools/render/printers.h"
#include "tools/stack_view.h"

namespace gmem::tools {
namespace {

using namespace testing;
using gmem::trace::alloc_kind;
using gmem::trace::python_note;

constexpr std::uintptr_t k_gmem = 0x100000000, k_cudart = 0x200000000, k_c10 = 0x300000000,
                         k_torch_cuda = 0x400000000, k_python = 0x500000000, k_cublas = 0x600000000,
                         k_cublaslt = 0x700000000, k_cusolver = 0x800000000,
                         k_cusparse = 0x900000000, k_nccl = 0xa00000000;
constexpr std::uint64_t k_mib = 1 << 20;

void add_module(gmem::trace::trace& t, const std::string& path, std::uintptr_t start) {
  gmem::trace::module m;
  m.path = path;
  m.load_bias = start;
  m.start = start;
  m.size = 0x100000;
  t.modules.push_back(m);
}

void add_live(gmem::trace::trace& t, std::uintptr_t address, std::uint64_t bytes,
              std::uint32_t stack, std::uint64_t ms, alloc_kind kind = alloc_kind::device) {
  t.live.push_back({address, bytes, bytes, kind == alloc_kind::host_pinned ? -1 : 0,
                    ~std::uintptr_t{0}, kind, 4242, ms * k_ms, stack});
}

// A PyTorch program as `gmem run -- python3 prog.py` traces it with PyTorch's caching
// allocator on (no variable set, as every user has it): what is outstanding at exit is the
// cache's segments (stacks 1-3, through libc10_cuda.so) and library-lifetime allocations
// (stacks 4-8: cuBLAS, cuBLASLt, cuSOLVER, cuSPARSE, NCCL). The program's tensors are inside
// the segments, unseen.
gmem::trace::trace pytorch_trace() {
  auto t = sample_trace();
  t.info.argv = {"python3", "prog.py"};
  t.info.command_line = "python3 prog.py";
  t.info.source = "prog.gmem";
  t.modules.clear();
  t.live.clear();
  t.stacks.clear();
  const std::string torch = "/usr/local/lib/python3.12/dist-packages/torch/";
  const std::string nvidia = "/usr/local/lib/python3.12/dist-packages/nvidia/";
  add_module(t, "/opt/gmem/lib/libgmem.so", k_gmem);
  add_module(t, "/usr/local/cuda/lib64/libcudart.so.13", k_cudart);
  add_module(t, torch + "lib/libc10_cuda.so", k_c10);
  add_module(t, torch + "lib/libtorch_cuda.so", k_torch_cuda);
  add_module(t, "/usr/lib/x86_64-linux-gnu/libpython3.12.so.1.0", k_python);
  add_module(t, nvidia + "cublas/lib/libcublas.so.13", k_cublas);
  add_module(t, nvidia + "cublas/lib/libcublasLt.so.13", k_cublaslt);
  add_module(t, nvidia + "cusolver/lib/libcusolver.so.12", k_cusolver);
  add_module(t, nvidia + "cusparse/lib/libcusparse.so.12", k_cusparse);
  add_module(t, nvidia + "nccl/lib/libnccl.so.2", k_nccl);
  t.python_locations[10] = {"/home/user/prog.py", "remember"};
  t.python_locations[11] = {"/home/user/prog.py", "step"};
  t.python_locations[12] = {"/home/user/prog.py", "<module>"};
  t.python_locations[13] = {torch + "nn/modules/module.py", "Module._call_impl"};
  t.python_locations[14] = {torch + "nn/functional.py", "linear"};
  t.python_locations[15] = {"/home/user/model.py", "Net.forward"};
  t.python_locations[16] = {torch + "_tensor.py", "Tensor.__mul__"};
  const gmem::trace::python_stack main_line{{{11, 10}, {12, 14}}, python_note::none};
  // 1: a linear layer called through nn.Module: torch's frames around the program's.
  t.stacks[1] = {k_gmem + 0x10,  k_cudart + 0x20,      k_c10 + 0x1000,
                 k_c10 + 0x2000, k_torch_cuda + 0x100, k_python + 0x30};
  t.python_stacks[1] = {{{14, 2100}, {15, 7}, {13, 1773}, {11, 9}, {12, 14}}, python_note::none};
  // 2: remember() at prog.py:5, called from step() at prog.py:10.
  t.stacks[2] = {k_gmem + 0x10, k_cudart + 0x20, k_c10 + 0x1000, k_c10 + 0x2000, k_python + 0x30};
  t.python_stacks[2] = {{{10, 5}, {11, 10}, {12, 14}}, python_note::none};
  // 3: an operator of torch's Python code, called at prog.py:11.
  t.stacks[3] = t.stacks[2];
  t.python_stacks[3] = {{{16, 40}, {11, 11}, {12, 14}}, python_note::none};
  // 4-8: handles and workspaces of the CUDA libraries.
  t.stacks[4] = {k_gmem + 0x10, k_cudart + 0x20, k_cublas + 0x10, k_torch_cuda + 0x200};
  t.python_stacks[4] = t.python_stacks[1];
  t.stacks[5] = {k_gmem + 0x10, k_cudart + 0x20, k_cublaslt + 0x10, k_torch_cuda + 0x210};
  t.python_stacks[5] = t.python_stacks[1];
  t.stacks[6] = {k_gmem + 0x10, k_cudart + 0x20, k_cusolver + 0x10, k_torch_cuda + 0x220};
  t.python_stacks[6] = main_line;
  t.stacks[7] = {k_gmem + 0x10, k_cudart + 0x20, k_cusparse + 0x10, k_torch_cuda + 0x230};
  t.python_stacks[7] = main_line;
  t.stacks[8] = {k_gmem + 0x10, k_nccl + 0x10, k_nccl + 0x20};
  t.python_stacks[8] = {{}, python_note::no_gil};
  // 42 MiB in 4 segments from 3 Python lines, as in the issue; then the libraries'.
  std::uintptr_t at = 0x7f0000000000;
  auto next = [&](std::uint64_t bytes) {
    const std::uintptr_t a = at;
    at += (bytes + k_mib - 1) / k_mib * k_mib;
    return a;
  };
  add_live(t, next(20 * k_mib), 20 * k_mib, 1, 1000);
  add_live(t, next(20 * k_mib), 20 * k_mib, 2, 1100);
  add_live(t, next(k_mib), k_mib, 3, 1200);
  add_live(t, next(k_mib), k_mib, 3, 1300);
  add_live(t, next(32 * k_mib), 32 * k_mib, 4, 900);
  add_live(t, next(4 * k_mib), 4 * k_mib, 5, 910);
  add_live(t, next(3 * k_mib), 3 * k_mib, 6, 920);
  add_live(t, next(k_mib), k_mib, 7, 930);
  add_live(t, next(6 * k_mib), 6 * k_mib, 8, 940);
  return t;
}

// The same program started with PYTORCH_NO_CUDA_MEMORY_CACHING=1 (recorded in the trace): each
// tensor is an allocation; it keeps five 4 MiB tensors from remember() at prog.py:5 and one
// from the linear layer.
gmem::trace::trace pytorch_no_caching_trace() {
  auto t = pytorch_trace();
  t.info.options = {{"GMEM_TRACE_SAVE", ""}, {"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"}};
  std::vector<gmem::trace::live_allocation> kept;
  for (const auto& a : t.live)
    if (a.stack_id >= 4) kept.push_back(a);
  t.live = kept;
  for (std::uintptr_t i = 0; i < 5; ++i)
    add_live(t, 0x7e0000000000 + i * 4 * k_mib, 4 * k_mib, 2, 2000 + i);
  add_live(t, 0x7e0010000000, 2 * k_mib, 1, 2100);
  std::sort(t.live.begin(), t.live.end(),
            [](const auto& a, const auto& b) { return a.address < b.address; });
  return t;
}

// The same program under gmem's default with PyTorch's allocator observed per tensor (the
// trace's flag): the cache's segments are live as before (stacks 1-3) and the tensors the
// tracker recorded lie inside them, kind tensor: five 4 MiB tensors kept by remember() at
// prog.py:5 in the second segment, the first at its very address. Their stack runs through
// the cache's code (stack 2), yet they are the program's.
gmem::trace::trace pytorch_observed_trace() {
  auto t = pytorch_trace();
  t.info.observed_frameworks =
      1u << static_cast<unsigned>(gmem::trace::observed_framework::pytorch);
  const std::uintptr_t segment = 0x7f0000000000 + 20 * k_mib;
  for (std::uintptr_t i = 0; i < 5; ++i)
    add_live(t, segment + i * 4 * k_mib, 4 * k_mib, 2, 2000 + i, alloc_kind::tensor);
  std::stable_sort(t.live.begin(), t.live.end(),
                   [](const auto& a, const auto& b) { return a.address < b.address; });
  return t;
}

std::vector<std::string> names(const std::vector<frame_info>& frames) {
  std::vector<std::string> out;
  for (const auto& f : frames)
    out.push_back(f.python ? f.function + "@" + f.location() : f.name());
  return out;
}

frame_info native(const std::string& function, const std::string& module) {
  frame_info f;
  f.function = function;
  f.module = module;
  return f;
}

frame_info python(const std::string& function, const std::string& file, int line) {
  frame_info f;
  f.function = function;
  f.file = file;
  f.line = line;
  f.module = "python";
  f.python = true;
  return f;
}

leak_report report_of(const gmem::trace::trace& t, symbolizer& symbols, const suppression_list& s,
                      frame_view view = frame_view::python_first) {
  leak_filter f;
  f.suppressions = &s;
  f.view = view;
  f.verdicts = leak_filter::show::all; // the caches apart, whatever the sites' verdicts
  return build_leak_report(t, symbols, f);
}

TEST(frameworks, pytorch_cache_is_named_not_counted_as_leaks) {
  const auto t = pytorch_trace();
  symbolizer symbols(module_ranges(t));
  const auto supp = suppression_list::defaults();
  const leak_report r = report_of(t, symbols, supp);
  ASSERT_TRUE(r.is_valid());
  EXPECT_TRUE(r.sites.empty());
  EXPECT_EQ(r.total_count, 0u);
  EXPECT_EQ(r.cached_bytes, 42 * k_mib);
  EXPECT_EQ(r.cached_count, 4u);
  ASSERT_EQ(r.cached.size(), 3u);
  ASSERT_EQ(r.caches.size(), 1u);
  EXPECT_STREQ(r.caches[0]->framework, "PyTorch");
  EXPECT_EQ(r.suppressed_count, 5u); // cuBLAS, cuBLASLt, cuSOLVER, cuSPARSE, NCCL
  const std::string out = print_leaks(t, r, {});
  EXPECT_EQ(out, golden("frameworks_pytorch_cache.txt", out));
  const auto j = leaks_json(t, r);
  EXPECT_EQ(j["cached_bytes"], 42 * k_mib);
  EXPECT_EQ(j["framework_caches"][0]["framework"], "PyTorch");
  EXPECT_EQ(j["cached"][0]["held_by"], "PyTorch's caching allocator");
  EXPECT_EQ(j["sites"].size(), 0u);
  // The exit summary of gmem run says the same: no LEAKS line, the cache named, the way out.
  const std::string summary = format_run_summary(&t, 4242, "python3", 0, {});
  EXPECT_EQ(summary.find("LEAKS"), std::string::npos);
  EXPECT_EQ(summary, golden("frameworks_run_summary.txt", summary));
  // Asked to, the readers count the cache like any allocation.
  leak_filter plain;
  plain.suppressions = &supp;
  plain.framework_caches = false;
  plain.verdicts = leak_filter::show::all;
  const leak_report counted = build_leak_report(t, symbols, plain);
  EXPECT_EQ(counted.total_bytes, 42 * k_mib);
  EXPECT_TRUE(counted.cached.empty());
}

TEST(frameworks, pytorch_without_its_cache_reports_the_tensors_by_the_programs_line) {
  const auto t = pytorch_no_caching_trace();
  symbolizer symbols(module_ranges(t));
  const auto supp = suppression_list::defaults();
  const leak_report r = report_of(t, symbols, supp);
  ASSERT_TRUE(r.is_valid());
  EXPECT_TRUE(r.cached.empty());
  ASSERT_EQ(r.sites.size(), 2u);
  EXPECT_EQ(r.sites[0].bytes, 20 * k_mib);
  EXPECT_EQ(r.sites[0].count, 5u);
  EXPECT_EQ(names(r.sites[0].frames)[0], "remember@prog.py:5");
  // torch's functional.py and module.py fold: the program's model.py line is #0.
  EXPECT_EQ(names(r.sites[1].frames)[0], "Net.forward@model.py:7");
  EXPECT_EQ(r.sites[1].python_folded, 2u);
  const std::string out = print_leaks(t, r, {});
  EXPECT_EQ(out, golden("frameworks_no_caching.txt", out));
  const std::string summary = format_run_summary(&t, 4242, "python3", 0, {});
  // One burst of allocations, none rising later: held, not leaks (leak_verdict.h).
  EXPECT_NE(summary.find("held all run: 22.0 MiB in 6 allocations from 2 sites"), std::string::npos)
      << summary;
  EXPECT_EQ(summary.find("LEAKS"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("caching allocator"), std::string::npos);
}

TEST(frameworks, observed_tensors_are_the_leaks_and_the_cache_is_reserved_memory) {
  const auto t = pytorch_observed_trace();
  symbolizer symbols(module_ranges(t));
  const auto supp = suppression_list::defaults();
  const leak_report r = report_of(t, symbols, supp);
  ASSERT_TRUE(r.is_valid());
  ASSERT_EQ(r.sites.size(), 1u);
  EXPECT_EQ(r.sites[0].bytes, 20 * k_mib);
  EXPECT_EQ(r.sites[0].count, 5u);
  EXPECT_EQ(r.sites[0].kinds, std::vector<std::string>{"tensor"});
  EXPECT_EQ(names(r.sites[0].frames)[0], "remember@prog.py:5");
  EXPECT_EQ(r.cached_bytes, 42 * k_mib); // the segments, not counted twice
  EXPECT_EQ(r.tensor_bytes, 20 * k_mib);
  ASSERT_EQ(r.caches.size(), 1u);
  EXPECT_TRUE(r.observed(r.caches[0]));
  const std::string out = print_leaks(t, r, {});
  EXPECT_EQ(out, golden("frameworks_observed.txt", out));
  const auto j = leaks_json(t, r);
  EXPECT_EQ(j["tensor_bytes"], 20 * k_mib);
  EXPECT_EQ(j["framework_caches"][0]["tensors_observed"], true);
  const std::string summary = format_run_summary(&t, 4242, "python3", 0, {});
  EXPECT_NE(summary.find("held all run: 20.0 MiB in 5 allocations from 1 site,"), std::string::npos)
      << summary;
  EXPECT_EQ(summary, golden("frameworks_observed_run_summary.txt", summary));
  // Without the flag (observation stopped), the cache gets the advice of an unobserved one.
  auto stopped = t;
  stopped.info.observed_frameworks = 0;
  const leak_report s = report_of(stopped, symbols, supp);
  EXPECT_FALSE(s.observed(s.caches[0]));
  EXPECT_NE(print_leaks(stopped, s, {}).find("to trace each tensor, start with"),
            std::string::npos);
}

// A library's workspace that PyTorch's cache served (cuBLAS takes its workspace from the
// cache) is a tensor the program does not hold: suppressed with its segment, so the cache's
// note never counts more tensor bytes than the cache holds.
TEST(frameworks, a_suppressed_tensor_is_not_counted_in_the_cache) {
  auto t = pytorch_observed_trace();
  add_live(t, 0x7f0000000000 + 45 * k_mib, 8 * k_mib, 4, 2200, alloc_kind::tensor); // libcublas
  symbolizer symbols(module_ranges(t));
  const auto supp = suppression_list::defaults();
  const leak_report r = report_of(t, symbols, supp);
  ASSERT_TRUE(r.is_valid());
  EXPECT_EQ(r.tensor_bytes, 20 * k_mib);
  EXPECT_EQ(r.tensor_count, 5u);
  EXPECT_EQ(r.suppressed_bytes, (46 + 8) * k_mib);
  ASSERT_EQ(r.sites.size(), 1u);
  EXPECT_EQ(r.sites[0].bytes, 20 * k_mib);
  EXPECT_NE(print_leaks(t, r, {}).find("20.0 MiB of it in live tensors"), std::string::npos);
}

TEST(frameworks, the_cudamallocasync_backend_is_not_a_cache) {
  auto t = pytorch_trace();
  t.info.options = {{"PYTORCH_CUDA_ALLOC_CONF", "backend:cudaMallocAsync"}};
  symbolizer symbols(module_ranges(t));
  const auto supp = suppression_list::defaults();
  const leak_report r = report_of(t, symbols, supp);
  EXPECT_TRUE(r.cached.empty());
  EXPECT_EQ(r.total_bytes, 42 * k_mib);
}

TEST(frameworks, all_frames_shows_the_frameworks_python_code) {
  const auto t = pytorch_no_caching_trace();
  symbolizer symbols(module_ranges(t));
  const auto folded = show_stack(t, 1, symbols, frame_view::python_first);
  EXPECT_EQ(names(folded.frames),
            (std::vector<std::string>{"Net.forward@model.py:7", "step@prog.py:9",
                                      "<module>@prog.py:14", "libc10_cuda.so+0x1000"}));
  EXPECT_EQ(folded.python_folded, 2u);
  const auto mixed = show_stack(t, 1, symbols, frame_view::mixed);
  EXPECT_EQ(mixed.python_folded, 2u);
  const auto all = show_stack(t, 1, symbols, frame_view::all);
  EXPECT_EQ(all.python_folded, 0u);
  EXPECT_EQ(names(all.frames)[0], "linear@functional.py:2100");
  EXPECT_EQ(names(all.frames)[2], "Module._call_impl@module.py:1773");
  // A stack whose Python frames are all the framework's keeps them: nothing else to show.
  auto only = t;
  only.python_stacks[1] = {{{14, 2100}, {13, 1773}}, python_note::none};
  const auto kept = show_stack(only, 1, symbols, frame_view::python_first);
  EXPECT_EQ(kept.python_folded, 0u);
  EXPECT_EQ(names(kept.frames)[0], "linear@functional.py:2100");
  const leak_report r = report_of(t, symbols, suppression_list::defaults(), frame_view::all);
  EXPECT_EQ(names(r.sites[1].frames)[0], "linear@functional.py:2100");
}

TEST(frameworks, recognised_by_function_names_whatever_the_variables_say) {
  const recorded_env none, no_cache = {{"PYTORCH_NO_CUDA_MEMORY_CACHING", "1"}},
                           platform = {{"XLA_PYTHON_CLIENT_ALLOCATOR", "platform"}};
  const std::string c10 = "/venv/lib/python3.12/site-packages/torch/lib/libc10_cuda.so";
  const auto* cache = framework_cache_of(
      {native("cudaMalloc", "/usr/local/cuda/lib64/libcudart.so.13"),
       native("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc("
              "signed char, unsigned long, CUstream_st*)",
              c10)},
      none);
  ASSERT_NE(cache, nullptr);
  EXPECT_STREQ(cache->framework, "PyTorch");
  // The uncached path of the same module: a tensor, once the variable says so.
  const std::vector<frame_info> uncached = {
      native("c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::allocate(unsigned "
             "long)",
             c10)};
  EXPECT_EQ(framework_cache_of(uncached, no_cache), nullptr);
  EXPECT_NE(framework_cache_of(uncached, none), nullptr); // unset: the cache is on
  // XLA's BFC allocator, by name or by module with the default allocator.
  const std::string plugin =
      "/venv/lib/python3.12/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so";
  const auto* bfc = framework_cache_of({native("tsl::BFCAllocator::AllocateRawInternal(unsigned "
                                               "long, unsigned long, bool, unsigned long)",
                                               plugin)},
                                       platform);
  ASSERT_NE(bfc, nullptr);
  EXPECT_STREQ(bfc->framework, "JAX");
  EXPECT_NE(framework_cache_of({native("", plugin)}, none), nullptr);
  EXPECT_EQ(framework_cache_of({native("", plugin)}, platform), nullptr);
  // CuPy's pool, by its Cython functions (the pool is turned off in code, not by a variable).
  const std::string cupy =
      "/venv/lib/python3.12/site-packages/cupy/cuda/memory.cpython-312-x86_64-linux-gnu.so";
  const auto* pool = framework_cache_of(
      {native("__pyx_f_4cupy_4cuda_6memory_22SingleDeviceMemoryPool__malloc", cupy)}, none);
  ASSERT_NE(pool, nullptr);
  EXPECT_STREQ(pool->framework, "CuPy");
  EXPECT_EQ(framework_cache_of({native("__pyx_f_4cupy_4cuda_6memory__malloc", cupy)}, none),
            nullptr);
  // A program's own frames are nobody's cache.
  EXPECT_EQ(framework_cache_of({native("make_buffer(unsigned long)", "/app/prog"),
                                python("step", "/app/prog.py", 3)},
                               none),
            nullptr);
  EXPECT_EQ(framework_caches().size(), 3u);
}

TEST(frameworks, default_suppressions_cover_what_frameworks_keep_by_design) {
  const auto supp = suppression_list::defaults();
  auto suppressed = [&](const frame_info& f) { return supp.match({f}) != nullptr; };
  // PyTorch's pinned host cache.
  EXPECT_TRUE(suppressed(native("at::cuda::(anonymous namespace)::CUDACachingHostAllocatorImpl::"
                                "allocate_host_memory_slowpath(unsigned long)",
                                "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so")));
  // The CUDA libraries by module, whatever their functions.
  for (const char* m :
       {"libcublas.so.13", "libcublasLt.so.13", "libcudnn_ops.so.9", "libcudnn.so.9",
        "libcufft.so.12", "libcusolver.so.12", "libcusparse.so.12", "libnccl.so.2"})
    EXPECT_TRUE(suppressed(native("", std::string("/venv/lib/nvidia/lib/") + m))) << m;
  // Their handle and workspace entry points, from a statically linked library.
  for (const char* fn :
       {"cusolverDnCreate", "cusparseCreate", "ncclMemAlloc",
        "at::cuda::getCurrentCUDASolverDnHandle()", "at::cuda::getCurrentCUDASparseHandle()"})
    EXPECT_TRUE(suppressed(native(fn, "/app/prog"))) << fn;
  // CUDA graph memory a framework keeps to replay.
  EXPECT_TRUE(suppressed(native("at::cuda::CUDAGraph::replay()", "libtorch_cuda.so")));
  EXPECT_TRUE(
      suppressed(native("stream_executor::gpu::GpuCommandBuffer::Submit()", "xla_cuda_plugin.so")));
  // What torch.distributed keeps until the process ends: DDP's buckets, a barrier's tensor.
  const std::string torch_py = "/venv/lib/python3.12/site-packages/torch/";
  EXPECT_TRUE(suppressed(python("DistributedDataParallel._pre_forward",
                                torch_py + "nn/parallel/distributed.py", 1598)));
  EXPECT_TRUE(suppressed(python("barrier", torch_py + "distributed/distributed_c10d.py", 4810)));
  EXPECT_TRUE(suppressed(
      python("DistributedDataParallel.__init__", torch_py + "nn/parallel/distributed.py", 850)));
  // ... not the model's own tensors that DDP's forward runs.
  EXPECT_FALSE(suppressed(
      python("DistributedDataParallel.forward", torch_py + "nn/parallel/distributed.py", 1650)));
  // Not the program's own allocations, nor PyTorch's device cache (named, not suppressed).
  EXPECT_FALSE(suppressed(native("make_buffer(unsigned long)", "/app/prog")));
  EXPECT_FALSE(
      suppressed(native("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc()",
                        "libc10_cuda.so")));
}

TEST(frameworks, python_frames_of_frameworks) {
  EXPECT_TRUE(is_framework_python_frame(
      python("linear", "/usr/lib/python3/dist-packages/torch/nn/functional.py", 1)));
  EXPECT_TRUE(is_framework_python_frame(
      python("f", "/venv/lib/python3.12/site-packages/jax/_src/numpy/ufunc_api.py", 1)));
  EXPECT_TRUE(is_framework_python_frame(
      python("f", "/venv/lib/python3.12/site-packages/transformers/generation/utils.py", 1)));
  EXPECT_TRUE(is_framework_python_frame(
      python("f", "/opt/conda/site-packages/cupy/_creation/basic.py", 1)));
  EXPECT_FALSE(is_framework_python_frame(python("step", "/home/user/prog.py", 1)));
  EXPECT_FALSE(is_framework_python_frame(
      python("f", "/venv/lib/python3.12/site-packages/mylib/torch/x.py", 1))); // not torch's
  EXPECT_FALSE(is_framework_python_frame(
      python("f", "/venv/lib/python3.12/site-packages/torch_helper.py", 1))); // a module file
  EXPECT_FALSE(is_framework_python_frame(
      native("f", "/venv/lib/python3.12/site-packages/torch/lib/libtorch_cuda.so")));
}

} // namespace
} // namespace gmem::tools
