#include "tools/analysis/suppressions.h"

#include "profiler/format/trace_types.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace gmem::tools {
namespace {

constexpr std::size_t k_max_file_bytes = 1 << 20;

// Allocations CUDA libraries make once per handle, plan or communicator and keep until the
// process exits (or the program destroys the handle): PyTorch and CuPy never do before exit.
// Then what frameworks keep for the process's life by design: PyTorch's pinned host cache
// (CachingHostAllocator: pinned blocks freed by tensors are cached, never given back) and the
// memory of CUDA graphs a framework keeps to replay (PyTorch's CUDAGraph, XLA's command
// buffers), and the pinned host staging buffer XLA keeps for transfers from JAX's device_put
// (pinned host memory allocated under pxla.py; JAX's device arrays are device memory); then
// what PyTorch's distributed code keeps past the program's last reference until the process
// ends: DistributedDataParallel's gradient buckets (made by its reducer when a forward rebuilds
// them in the order the first backward used, under _pre_forward) and the tensors
// torch.distributed's collectives make for themselves (a barrier's), held after
// destroy_process_group and after a garbage collection; and the buckets the reducer makes in
// DDP's constructor, which some runs keep to the end too (1 run in 4 on 2 H200s). New patterns
// go at the end: a pattern's origin names its line.
constexpr const char* k_default_text =
    R"(# gmem's default suppressions: library-lifetime allocations
leak:libcublas
leak:cublasCreate
leak:cublasLtCreate
leak:at::cuda::getCurrentCUDABlasHandle
leak:at::cuda::getCurrentCUDABlasLtHandle
leak:at::cuda::getCUDABlasLtWorkspace
leak:libcudnn
leak:cudnnCreate
leak:at::native::getCudnnHandle
leak:libcufft
leak:cufftPlan
leak:cufftMakePlan
leak:at::native::detail::CuFFTConfig
leak:libnccl
leak:ncclCommInit
leak:ncclCommSplit
leak:at::cuda::*getNewWorkspace
leak:libcusolver
leak:cusolverDnCreate
leak:cusolverSpCreate
leak:at::cuda::getCurrentCUDASolverDnHandle
leak:libcusparse
leak:cusparseCreate
leak:at::cuda::getCurrentCUDASparseHandle
leak:ncclMemAlloc
leak:CachingHostAllocator
leak:allocate_host_memory_slowpath
leak:at::cuda::CUDAGraph::
leak:CUDAGraph::capture_end
leak:xla::gpu::*CommandBuffer
leak:stream_executor::gpu::*CommandBuffer
leak.host_pinned:jax/_src/interpreters/pxla.py
leak:DistributedDataParallel._pre_forward
leak:torch/distributed/distributed_c10d.py
leak:DistributedDataParallel.__init__
)";

// Glob with `*` at position p of pattern against text from t, anchored at both ends.
bool glob(const char* p, const char* t) {
  const char *star = nullptr, *resume = nullptr;
  while (*t) {
    if (*p == '*') {
      star = p++;
      resume = t;
    } else if (*p && *p == *t) {
      ++p, ++t;
    } else if (star) {
      p = star + 1;
      t = ++resume;
    } else {
      return false;
    }
  }
  while (*p == '*')
    ++p;
  return *p == '\0';
}

} // namespace

bool pattern_matches(const std::string& pattern, const std::string& text) {
  if (pattern.empty()) return false;
  std::string p = pattern;
  const bool head = p.front() == '^';
  if (head) p.erase(0, 1);
  const bool tail = !p.empty() && p.back() == '$';
  if (tail) p.pop_back();
  if (p.empty()) return false;
  if (!head) p.insert(0, "*");
  if (!tail) p += '*';
  return glob(p.c_str(), text.c_str());
}

suppression_list suppression_list::defaults() {
  std::string error;
  return *parse(k_default_text, "default", &error);
}

std::optional<suppression_list>
suppression_list::parse(const std::string& text, const std::string& origin, std::string* error) {
  suppression_list out;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos <= text.size();) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') {
      if (end == text.size()) break;
      continue;
    }
    const auto last = line.find_last_not_of(" \t\r");
    line = line.substr(first, last - first + 1);
    const std::string where = origin + ":" + std::to_string(line_no);
    std::string kind;
    if (line.rfind("leak.", 0) == 0 && line.find(':') != std::string::npos) {
      kind = line.substr(5, line.find(':') - 5);
      bool known = false;
      for (std::uint8_t k = 0; k < gmem::trace::k_alloc_kind_count; ++k)
        known = known || kind == gmem::trace::to_string(static_cast<gmem::trace::alloc_kind>(k));
      if (!known) {
        *error = where + ": unknown allocation kind '" + kind.substr(0, 40) +
                 "' (kinds: device, async, host_pinned, managed, pitched, vmm, ipc, mempool, "
                 "capture, passthrough, tensor)";
        return std::nullopt;
      }
      line = "leak:" + line.substr(line.find(':') + 1);
    }
    if (line.rfind("leak:", 0) != 0) {
      *error = where +
               ": expected 'leak:PATTERN' or 'leak.KIND:PATTERN' (or a # comment), found '" +
               line.substr(0, 80) + "'";
      return std::nullopt;
    }
    std::string pattern = line.substr(5);
    if (pattern.empty() || pattern == "^" || pattern == "$" || pattern == "^$" ||
        pattern.find_first_not_of('*') == std::string::npos) {
      *error = where + ": empty pattern (it would suppress every leak)";
      return std::nullopt;
    }
    out.entries_.push_back({std::move(pattern), where, std::move(kind)});
    if (end == text.size()) break;
  }
  return out;
}

std::optional<suppression_list> suppression_list::load(const std::string& path,
                                                       std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    *error = "cannot open suppressions file " + path + ": " + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st {};
  std::string text;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    *error = "suppressions file " + path + " is not a regular file";
    return std::nullopt;
  }
  if (static_cast<std::uint64_t>(st.st_size) > k_max_file_bytes) {
    ::close(fd);
    *error = "suppressions file " + path + " is larger than 1 MiB";
    return std::nullopt;
  }
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *error = "cannot read suppressions file " + path + ": " + std::strerror(errno);
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    if (text.size() > k_max_file_bytes) {
      *error = "suppressions file " + path + " is larger than 1 MiB";
      ::close(fd);
      return std::nullopt;
    }
  }
  ::close(fd);
  if (text.find('\0') != std::string::npos) {
    *error = "suppressions file " + path + " is not text (it holds a NUL byte)";
    return std::nullopt;
  }
  return parse(text, path, error);
}

void suppression_list::append(const suppression_list& other) {
  entries_.insert(entries_.end(), other.entries_.begin(), other.entries_.end());
}

const suppression* suppression_list::match(const std::vector<frame_info>& frames,
                                           const std::string& kind) const {
  for (const auto& f : frames)
    for (const auto& s : entries_)
      if (!(s.kind.empty() || s.kind == kind))
        continue;
      else if (pattern_matches(s.pattern, f.function) || pattern_matches(s.pattern, f.file) ||
               (!f.python && pattern_matches(s.pattern, f.module)))
        return &s;
  return nullptr;
}

} // namespace gmem::tools
