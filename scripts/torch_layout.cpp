// Derives the row of TORCH_LAYOUTS (python/gmem_bootstrap/sitecustomize.py) for the PyTorch it
// is compiled against: the vtable slot of CUDAAllocator::attachAllocatorTraceTracker and the
// layout of TraceEntry. On a machine with that PyTorch (a CUDA build) and its headers:
//   T=$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')
//   g++ -std=c++17 -Wno-invalid-offsetof -D_GLIBCXX_USE_CXX11_ABI=1 -I$T/include \
//     -I$T/include/torch/csrc/api/include -I/usr/local/cuda/include \
//     scripts/torch_layout.cpp -o torch_layout && ./torch_layout
// prints `(2, 11): dict(slot=44, ...)`, the line to add to the table (docs/interpose.md,
// "Per-tensor observation"). tests/gpu/frameworks_gpu_test.sh runs it when a compiler and the
// headers are there and compares its line with the table's.
#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/version.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <type_traits>

namespace alloc = c10::cuda::CUDACachingAllocator;
using Entry = alloc::TraceEntry;

// Itanium C++ ABI: a pointer to a virtual member function holds 1 + its byte offset in the
// vtable in its first word.
template <typename M> std::size_t slot_of(M member) {
  std::uintptr_t words[2];
  static_assert(sizeof(member) == sizeof(words), "not an Itanium member function pointer");
  std::memcpy(words, &member, sizeof words);
  return (words[0] - 1) / sizeof(void*);
}

// The widths gmem reads (profiler/recorder/tensor_observer.h): int32 action, int8 device, 8-byte
// others.
static_assert(sizeof(Entry::Action) == 4, "TraceEntry::Action is not 4 bytes");
static_assert(sizeof(std::declval<Entry&>().device_) == 1, "device_ is not 1 byte");
static_assert(sizeof(std::declval<Entry&>().addr_) == 8, "addr_ is not 8 bytes");
static_assert(sizeof(std::declval<Entry&>().stream_) == 8, "stream_ is not 8 bytes");
static_assert(sizeof(std::declval<Entry&>().size_) == 8, "size_ is not 8 bytes");

int main() {
  std::printf("(%d, %d): dict(slot=%zu, entry=%zu, action=%zu, device=%zu, addr=%zu, stream=%zu, "
              "size=%zu,\n          alloc=%d, free=%d, action_max=%d),\n",
              TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR,
              slot_of(&alloc::CUDAAllocator::attachAllocatorTraceTracker), sizeof(Entry),
              offsetof(Entry, action_), offsetof(Entry, device_), offsetof(Entry, addr_),
              offsetof(Entry, stream_), offsetof(Entry, size_), static_cast<int>(Entry::ALLOC),
              static_cast<int>(Entry::FREE_REQUESTED), static_cast<int>(Entry::OOM));
}
