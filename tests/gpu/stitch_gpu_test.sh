#!/usr/bin/env bash
# Stitching on the real driver (tests/gpu/stitch.cu): a 256 MiB request that only the free
# pages of four 64 MiB holes can serve. Without gmem: correct results. Under gmem with
# GMEM_STITCH=1: correct results, one stitched range at least (pool and vmm counters), and no
# growth of the device's used memory (NVML) for the request. With GMEM_STITCH=0 the arena grows
# (printed for comparison, not a failure).
source "$(dirname "$0")/lib.sh"
build_cu stitch stitch.cu -ldl
fail=0
"$bin/stitch" >"$bin/stitch_plain.log" 2>&1 || { cat "$bin/stitch_plain.log"; echo "FAIL: stitch without gmem"; fail=1; }
GMEM_STITCH=1 with_shim "$bin/stitch" --expect-no-growth >"$bin/stitch.log" 2>&1
rc=$?
grep -E '^(stitch|FAIL|gmem: pool device=0 kind=device|gmem: vmm)' "$bin/stitch.log" | cut -c1-400
[ $rc -eq 0 ] || { echo "FAIL: stitch under gmem with GMEM_STITCH=1 (exit $rc)"; fail=1; }
stitches=$(sed -n 's/^gmem: pool device=0 kind=device .* stitches=\([0-9]*\) .*/\1/p' "$bin/stitch.log" | head -1)
[ "${stitches:-0}" -ge 1 ] || { echo "FAIL: the pool made no stitched range (stitches=${stitches:-none})"; fail=1; }
grep -qE '^gmem: vmm device=0 .* stitches=[1-9]' "$bin/stitch.log" ||
  { echo "FAIL: the upstream mapped no stitched range"; fail=1; }
grep -qE '^gmem: vmm device=0 .* unstitches=[1-9]' "$bin/stitch.log" ||
  { echo "FAIL: the stitched range was not given back"; fail=1; }
GMEM_STITCH=0 GMEM_ARENA_PAGE_MB=2 with_shim "$bin/stitch" >"$bin/stitch_off.log" 2>&1 ||
  { grep -E '^(stitch|FAIL)' "$bin/stitch_off.log"; echo "FAIL: stitch under gmem with GMEM_STITCH=0"; fail=1; }
echo "without stitching: $(grep -E '^stitch growth' "$bin/stitch_off.log")"
[ $fail -eq 0 ] && echo "stitch_gpu_test: ok"
exit $fail
