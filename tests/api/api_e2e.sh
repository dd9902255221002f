#!/usr/bin/env bash
# The C API end to end over the fake driver (tests/fake_cuda): libgmem_client.so alone (driver
# fallbacks), and with libgmem.so preloaded (forwarded to the shim's pool). Also checks the
# answer without any driver. Exit 0 pass, 1 fail (a part not built is a failure: make test builds
# them all).
set -u
build=${GMEM_BUILD:-build}
probe=$build/tests/api/api_probe
fake_dir=$build/tests/fake_cuda
shim=${GMEM_SHIM:-$build/lib/libgmem.so}
[ -x "$probe" ] || { echo "api_e2e: $probe not built"; exit 1; }
for f in "$fake_dir/libcuda.so.1" "$shim"; do
  [ -e "$f" ] || { echo "api_e2e: $f not built"; exit 1; }
done

fails=0
out=""
expect() { # key value
  local got
  got=$(sed -n "s/^$1=//p" <<<"$out" | head -1)
  if [ "$got" != "$2" ]; then echo "FAIL [$phase] $1: expected '$2', got '$got'"; fails=$((fails + 1)); fi
}
expect_ge() { # key minimum
  local got
  got=$(sed -n "s/^$1=//p" <<<"$out" | head -1)
  if [ -z "$got" ] || [ "$got" -lt "$2" ]; then echo "FAIL [$phase] $1: expected >= $2, got '$got'"; fails=$((fails + 1)); fi
}
expect_le() { # key maximum
  local got
  got=$(sed -n "s/^$1=//p" <<<"$out" | head -1)
  if [ -z "$got" ] || [ "$got" -gt "$2" ]; then echo "FAIL [$phase] $1: expected <= $2, got '$got'"; fails=$((fails + 1)); fi
}
expect_text() { # substring of the output
  grep -qF -- "$1" <<<"$out" || { echo "FAIL [$phase] output lacks '$1'"; fails=$((fails + 1)); }
}

phase="no driver"
out=$(env -u LD_PRELOAD LD_LIBRARY_PATH=/nonexistent "$probe" 2>&1)
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda.so.1 '; then
  expect available 0
  expect start.status GMEM_ERROR_NO_DRIVER
  expect report.status GMEM_ERROR_NO_DRIVER
  expect_text "libcuda.so.1 could not be loaded"
fi
expect null.status GMEM_ERROR_INVALID_ARGUMENT
expect set_limit_bad_device.status GMEM_ERROR_INVALID_ARGUMENT

phase="fake driver, no shim"
out=$(env -u LD_PRELOAD LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_TOTAL_BYTES=512M "$probe" 2>&1)
echo "$out" | sed 's/^/  | /' | head -5
expect available 0
expect start.status GMEM_OK
expect start.flags 2
expect start.device_total_bytes 536870912
expect start.version 4
expect header_only.status GMEM_OK
expect header_only.struct_size 16
expect allocated.status GMEM_OK
expect allocated.live_bytes 0
expect mark.status GMEM_ERROR_NO_SHIM
expect reset_peak.status GMEM_ERROR_NO_SHIM
expect empty_cache.status GMEM_OK
expect set_limit.status GMEM_OK
expect allocatable_after_limit 67108864
expect can_allocate_1M 1
expect can_allocate_1T 0
expect report_small.status GMEM_ERROR_TRUNCATED
expect report.status GMEM_OK
expect_text "libgmem.so not preloaded"
expect_text "limit 64.0 MiB"

phase="fake driver, shim preloaded"
out=$(LD_PRELOAD="$(realpath "$shim")" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_TOTAL_BYTES=512M \
      GMEM_TRACE=0 "$probe" 2>&1)
echo "$out" | sed 's/^/  | /' | head -5
expect available 1
expect start.status GMEM_OK
expect start.flags 3
expect allocated.status GMEM_OK
expect_ge allocated.live_bytes 8388608
expect_ge allocated.reserved_bytes 8388608
expect freed.live_bytes 0
expect_ge freed.peak_live_bytes 8388608
expect mark.status GMEM_OK
expect reset_peak.status GMEM_OK
expect empty_cache.status GMEM_OK
expect emptied.peak_live_bytes 0
expect emptied.reserved_bytes 0
expect set_limit.status GMEM_OK
expect_le allocatable_after_limit 67108864
expect_ge allocatable_after_limit 1
expect can_allocate_1T 0
expect report.status GMEM_OK
expect_text "pool figures from libgmem.so"
expect_text "pool reserved"

phase="shim, limit set before any pool exists"
out=$(LD_PRELOAD="$(realpath "$shim")" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_TOTAL_BYTES=512M \
      GMEM_TRACE=0 "$probe" 8388608 limit-first 2>&1)
expect early_limit.status GMEM_OK
expect allocated.status GMEM_OK
expect allocated.limit_bytes 16777216
expect_le allocated.allocatable_bytes 8388608
out=$(LD_PRELOAD="$(realpath "$shim")" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_TOTAL_BYTES=512M \
      GMEM_TRACE=0 "$probe" 33554432 limit-first 2>&1)
expect alloc.status failed # 32 MiB over the 16 MiB limit: the pool says out of memory

phase="shim preloaded but disabled (GMEM_ENABLE=0)"
out=$(LD_PRELOAD="$(realpath "$shim")" LD_LIBRARY_PATH="$fake_dir" FAKE_CUDA_TOTAL_BYTES=512M \
      GMEM_ENABLE=0 GMEM_TRACE=0 "$probe" 2>&1)
expect available 0
expect start.status GMEM_OK
expect start.flags 2
expect allocated.live_bytes 0
expect mark.status GMEM_ERROR_NO_SHIM
expect reset_peak.status GMEM_ERROR_NO_SHIM

[ $fails -eq 0 ] && echo "api_e2e: all checks passed" && exit 0
echo "api_e2e: $fails check(s) failed"
exit 1
