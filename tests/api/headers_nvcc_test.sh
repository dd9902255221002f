#!/usr/bin/env bash
# The public headers (gmem.h, chunking.hpp) in a CUDA source file: nvcc compiles it with its
# default dialect (C++17 since CUDA 11), then with -std=c++20, host and device code. A CUDA user
# who includes them must get no error. Exit 0 pass, 77 skip (no nvcc), 1 fail.
set -u
cuda_home=${CUDA_HOME:-/usr/local/cuda}
nvcc=${NVCC:-$cuda_home/bin/nvcc}
build=${GMEM_BUILD:-build}
root=$(cd "$(dirname "$0")/../.." && pwd)
command -v "$nvcc" >/dev/null 2>&1 || { echo "headers_nvcc: skipped: no nvcc at $nvcc"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cat >"$tmp/headers.cu" <<'CU'
#include <gmem/chunking.hpp>
#include <gmem/gmem.h>

#include <cstdint>
#include <vector>

__global__ void fill(int* p, int n, int v) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) p[i] = v;
}

int count_batches() {
  std::vector<int> input(100, 1);
  int batches = 0;
  gmem::chunk_options co;
  co.available_bytes = 1 << 20;
  const gmem::chunk_result r = gmem::for_each_batch(
      input.begin(), input.end(), std::uint64_t{1024},
      [&](gmem::span<const int> items, std::size_t) { batches += items.empty() ? 0 : 1; }, co);
  const gmem::chunk_plan p = gmem::plan_chunks(100, 1024, co);
  return r.ok() && p.fits ? batches : -1;
}

int launch(int* d) {
  fill<<<1, 32>>>(d, 32, count_batches());
  gmem_stats_t st{};
  st.struct_size = sizeof st;
  return static_cast<int>(gmem_available()) + static_cast<int>(st.struct_size != 0);
}
CU
fails=0
for std in "" "-std=c++17" "-std=c++20"; do
  if "$nvcc" $std -I"$root/include" -Xcompiler -Wall,-Wextra -c "$tmp/headers.cu" \
      -o "$tmp/headers.o" >"$tmp/log" 2>&1; then
    echo "headers_nvcc: ok: nvcc ${std:-(default dialect)}"
  else
    echo "FAIL headers_nvcc: nvcc ${std:-(default dialect)} rejects the public headers:"
    sed 's/^/  /' "$tmp/log" | head -20
    fails=$((fails + 1))
  fi
done
[ "$fails" -eq 0 ] && echo "headers_nvcc: ok" && exit 0
exit 1
