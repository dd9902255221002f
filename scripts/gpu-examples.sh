#!/usr/bin/env bash
# The examples on a real GPU (run by `make test-gpu`, or by hand on the GPU machine):
#   - the C API answers from the driver without the shim and from the pool with it;
#   - voxelize runs its PTX kernel (not the host fallback);
#   - a batch ~5x larger than GMEM_LIMIT, chunked under `gmem run`, gives the same checksum
#     as the unchunked batch on a large limit, as a run that starts from a too-big chunk (OOM
#     retries), as the host computation, as a streamed run (for_each_batch), and as a chunked
#     run without gmem at all;
#   - examples/chunked_torch.py (when PyTorch with CUDA is importable) matches its CPU result;
#   - leaky_pipeline's three leak sites show up in `gmem leaks`.
# Exit 0 pass, 77 skip (no GPU), 1 fail. Environment: GMEM_BUILD/BUILD (build), MAKE (make),
# GMEM_PREBUILT=1 (use what the build folder holds; build nothing).
set -u
cd "$(dirname "$0")/.."
BUILD=${GMEM_BUILD:-${BUILD:-build}}
MAKE=${MAKE:-make}
if ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }; then
  echo "gpu-examples: skipped: no NVIDIA GPU (nvidia-smi -L lists none)"
  exit 77
fi
nvidia-smi -L | head -1
if [ "${GMEM_PREBUILT:-0}" = 1 ]; then # built elsewhere and copied here: build nothing
  for f in "$BUILD/lib/libgmem.so" "$BUILD/bin/gmem" "$BUILD/tests/api/api_probe" "$BUILD/examples/voxelize"; do
    [ -x "$f" ] || { echo "gpu-examples: GMEM_PREBUILT=1 but $f is missing"; exit 1; }
  done
else
  $MAKE --no-print-directory -j8 BUILD="$BUILD" examples "$BUILD/lib/libgmem.so" "$BUILD/bin/gmem" \
    "$BUILD/tests/api/api_probe" \
    >"/tmp/gpu-examples-build.$$.log" 2>&1 || { tail -30 "/tmp/gpu-examples-build.$$.log"; echo "gpu-examples: build failed"; exit 1; }
fi

gmem=$BUILD/bin/gmem vox=$BUILD/examples/voxelize
out=$(mktemp -d /tmp/gmem-gpu-examples.XXXXXX)
size=(--clouds 256 --points 262144 --grid 128) # 5 MiB per cloud, 1.25 GiB per batch
fails=0
checksum() { sed -n 's/^voxelize: checksum=\([0-9a-f]*\).*/\1/p' "$1"; }
run() { # name, command...: runs, keeps the log, prints the key lines
  local name=$1; shift
  echo "== $name: $*"
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  grep -E '^voxelize: (plan|[0-9]+ chunks|streamed|checksum)|compute:|^gmem: (device|LEAKS)' "$out/$name.log" | sed 's/^/   /'
  if [ $rc -ne 0 ]; then echo "   FAIL: exit $rc"; tail -5 "$out/$name.log" | sed 's/^/   | /'; fails=$((fails + 1)); fi
}

# The C API on the real driver, without and with the shim.
probe=$BUILD/tests/api/api_probe
val() { sed -n "s/^$1=//p" "$2" | head -1; }
"$probe" >"$out/probe.log" 2>&1
LD_PRELOAD="$(realpath "$BUILD/lib/libgmem.so")" GMEM_TRACE=0 "$probe" >"$out/probe_shim.log" 2>&1
echo "== api_probe: available $(val available "$out/probe.log") / $(val available "$out/probe_shim.log")," \
     "device total $(val start.device_total_bytes "$out/probe.log"), live after an 8 MiB alloc" \
     "$(val allocated.live_bytes "$out/probe_shim.log") (shim)"
[ "$(val available "$out/probe.log")" = 0 ] && [ "$(val start.status "$out/probe.log")" = GMEM_OK ] &&
  [ "$(val available "$out/probe_shim.log")" = 1 ] && [ "$(val start.flags "$out/probe_shim.log")" = 3 ] &&
  [ "$(val allocated.live_bytes "$out/probe_shim.log")" -ge 8388608 ] &&
  [ "$(val emptied.reserved_bytes "$out/probe_shim.log")" = 0 ] &&
  [ "$(val allocatable_after_limit "$out/probe_shim.log")" -le 67108864 ] &&
  [ "$(val report.status "$out/probe_shim.log")" = GMEM_OK ] ||
  { echo "   FAIL: api_probe answers (logs: $out/probe*.log)"; fails=$((fails + 1)); }

run chunked env GMEM_LIMIT=256M "$gmem" run -- "$vox" "${size[@]}"
grep -q 'compute: GPU kernel' "$out/chunked.log" || { echo "   FAIL: the kernel did not run"; fails=$((fails + 1)); }
run unchunked env GMEM_LIMIT=4G "$gmem" run -q -- "$vox" "${size[@]}" --unchunked
run retried env GMEM_LIMIT=256M "$gmem" run -q -- "$vox" "${size[@]}" --chunk 256
run host env GMEM_LIMIT=256M "$gmem" run -q -- "$vox" "${size[@]}" --host
run no_gmem "$vox" "${size[@]}"
run stream env GMEM_LIMIT=256M "$gmem" run -q -- "$vox" "${size[@]}" --measure

ref=$(checksum "$out/unchunked.log")
for name in chunked retried host no_gmem stream; do
  got=$(checksum "$out/$name.log")
  if [ -z "$ref" ] || [ "$got" != "$ref" ]; then
    echo "FAIL: $name checksum '$got' != unchunked '$ref'"; fails=$((fails + 1))
  fi
done
[ -n "$ref" ] && echo "checksums: chunked, retried, host, no-gmem, streamed all equal unchunked $ref"
grep -q '[1-9][0-9]* out-of-memory retries' "$out/retried.log" ||
  echo "note: the --chunk 256 run needed no OOM retry (the pool found room)"

if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  # PyTorch's own cache off, so its tensors come from gmem's pool under the limit. (cuBLAS
  # alone needs more than 64M for its handle and workspaces on the H200.)
  echo "== torch: gmem.chunked over a 768 MiB batch, GMEM_LIMIT=256M"
  GMEM_LIMIT=256M PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$gmem" run -q -- \
    python3 examples/chunked_torch.py --items 65536 --dim 1024 >"$out/torch.log" 2>&1
  rc=$?
  grep '^chunked_torch' "$out/torch.log" | sed 's/^/   /'
  [ $rc -eq 0 ] || { echo "   FAIL: exit $rc"; tail -8 "$out/torch.log" | sed 's/^/   | /'; fails=$((fails + 1)); }
else
  echo "note: PyTorch with CUDA not importable; examples/chunked_torch.py not run"
fi

trace=$out/leaky.trace
run leaky env GMEM_TRACE_SAVE="$trace" "$gmem" run -- "$BUILD/examples/leaky_pipeline"
"$gmem" leaks "$trace" >"$out/leaks.txt" 2>&1
rc=$?
sed 's/^/   /' "$out/leaks.txt" | head -40
[ $rc -eq 1 ] || { echo "FAIL: gmem leaks exited $rc, expected 1 (leaks found)"; fails=$((fails + 1)); }
for site in reload_weights cache_frame_features run_batch; do
  grep -q "$site" "$out/leaks.txt" || { echo "FAIL: leak site $site not in gmem leaks"; fails=$((fails + 1)); }
done
"$gmem" frag "$trace" | head -12 | sed 's/^/   /'

echo "gpu-examples: logs in $out"
[ $fails -eq 0 ] && { echo "gpu-examples: all checks passed"; exit 0; }
echo "gpu-examples: $fails check(s) failed"
exit 1
