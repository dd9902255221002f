#!/usr/bin/env bash
# What `gmem run` does to the frameworks' allocator variables (GMEM_FRAMEWORKS), on
# the fake driver: observe (the default) sets nothing and says nothing; pool sets
# PYTORCH_NO_CUDA_MEMORY_CACHING=1, XLA_PYTHON_CLIENT_ALLOCATOR=platform and
# XLA_PYTHON_CLIENT_PREALLOCATE=false and says so in one line; a value the user set wins; off
# sets nothing; the flag beats the environment; a bad mode is refused; the trace records the
# variables the readers interpret.
set -u
B=${GMEM_BUILD:-build}
GMEM=$B/bin/gmem
LEAK=$B/tests/tools/leak_sites
for f in "$GMEM" "$LEAK" "$B/lib/libgmem.so" "$B/tests/fake_cuda/libcuda.so.1"; do
  [ -e "$f" ] || { echo "missing $f (make builds it)"; exit 1; }
done
export LD_LIBRARY_PATH=$B/tests/fake_cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
unset GMEM_FRAMEWORKS PYTORCH_NO_CUDA_MEMORY_CACHING PYTORCH_CUDA_ALLOC_CONF \
  XLA_PYTHON_CLIENT_ALLOCATOR XLA_PYTHON_CLIENT_PREALLOCATE
source "$(dirname "$0")/../traced_runs.sh"

SHOW='echo "P=${PYTORCH_NO_CUDA_MEMORY_CACHING-unset} A=${XLA_PYTHON_CLIENT_ALLOCATOR-unset} R=${XLA_PYTHON_CLIENT_PREALLOCATE-unset}"'
TAIL='(CUDA graphs and torch.compile(mode="reduce-overhead") need PyTorch'"'"'s cache: --frameworks observe)'
# run NAME EXPECTED_STDOUT EXPECTED_MESSAGE(or "") [NAME=VALUE... gmem-run-arguments...] --
# runs `sh -c $SHOW` under gmem run with those variables and arguments (an argument starting
# with - is gmem run's) and checks what the program saw and gmem's line about it.
run() {
  local name=$1 want_out=$2 want_msg=$3 failed=$failures
  shift 3
  local env=() args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    case $1 in -*) args+=("$1") ;; *=*) env+=("$1") ;; *) args+=("$1") ;; esac
    shift
  done
  env "${env[@]}" "$GMEM" run "${args[@]}" -- sh -c "$SHOW" >"$W/$name.out" 2>"$W/$name.err"
  local rc=$?
  [ $rc -eq 0 ] || fail "$name: gmem run exited $rc: $(cat "$W/$name.err")"
  [ "$(cat "$W/$name.out")" = "$want_out" ] ||
    fail "$name: the program saw '$(cat "$W/$name.out")', expected '$want_out'"
  local msg
  msg=$(grep 'GMEM_FRAMEWORKS' "$W/$name.err")
  [ "$msg" = "$want_msg" ] || fail "$name: gmem said '$msg', expected '$want_msg'"
  [ $failures -eq $failed ] && echo "ok: $name: $want_out${want_msg:+ / $want_msg}"
}

ALL_SET="gmem: GMEM_FRAMEWORKS=pool: set PYTORCH_NO_CUDA_MEMORY_CACHING=1 XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false $TAIL"

echo "== the default (observe): nothing set, nothing said"
run default "P=unset A=unset R=unset" "" --
run observe "P=unset A=unset R=unset" "" --frameworks observe --

echo "== pool: the variables set, one line says so"
run pool "P=1 A=platform R=false" "$ALL_SET" --frameworks pool --
run pool_env "P=1 A=platform R=false" "$ALL_SET" GMEM_FRAMEWORKS=pool --
run pool_dash_e "P=1 A=platform R=false" "$ALL_SET" --env=GMEM_FRAMEWORKS=pool --
run quiet "P=1 A=platform R=false" "" -q --frameworks pool --

echo "== explicit values win"
run explicit "P=0 A=platform R=true" \
  "gmem: GMEM_FRAMEWORKS=pool: set XLA_PYTHON_CLIENT_ALLOCATOR=platform; kept as you set them: PYTORCH_NO_CUDA_MEMORY_CACHING=0 XLA_PYTHON_CLIENT_PREALLOCATE=true $TAIL" \
  PYTORCH_NO_CUDA_MEMORY_CACHING=0 XLA_PYTHON_CLIENT_PREALLOCATE=true --frameworks pool --
run explicit_empty "P= A=platform R=false" \
  "gmem: GMEM_FRAMEWORKS=pool: set XLA_PYTHON_CLIENT_ALLOCATOR=platform XLA_PYTHON_CLIENT_PREALLOCATE=false; kept as you set them: PYTORCH_NO_CUDA_MEMORY_CACHING= $TAIL" \
  PYTORCH_NO_CUDA_MEMORY_CACHING= --frameworks pool --
run observe_keeps_user "P=1 A=unset R=unset" "" PYTORCH_NO_CUDA_MEMORY_CACHING=1 --

echo "== the opt-out, and the flag over the environment"
run off "P=unset A=unset R=unset" "" --frameworks off --
run flag_beats_env "P=unset A=unset R=unset" "" GMEM_FRAMEWORKS=pool --frameworks off --

echo "== a bad mode"
"$GMEM" run --frameworks maybe -- true >"$W/bad.out" 2>"$W/bad.err"
rc=$?
[ $rc -eq 2 ] || fail "--frameworks maybe: exit $rc, expected 2 (usage)"
grep -q "GMEM_FRAMEWORKS='maybe' is not observe, pool or off" "$W/bad.err" ||
  fail "--frameworks maybe: $(cat "$W/bad.err")"
GMEM_FRAMEWORKS=maybe "$GMEM" run -- sh -c "$SHOW" >"$W/bad_env.out" 2>"$W/bad_env.err"
[ "$(cat "$W/bad_env.out")" = "P=unset A=unset R=unset" ] ||
  fail "GMEM_FRAMEWORKS=maybe: the program saw $(cat "$W/bad_env.out")"
grep -q "gmem: warning: GMEM_FRAMEWORKS='maybe' is not observe, pool or off; using observe" \
  "$W/bad_env.err" || fail "GMEM_FRAMEWORKS=maybe: no warning: $(cat "$W/bad_env.err")"
echo "ok: bad modes refused (flag) or warned about (environment)"

echo "== the trace records what the readers interpret"
"$GMEM" run --frameworks pool -e GMEM_TRACE_SAVE="$W/run.%p.gmem" -- "$LEAK" >"$W/leak.out" \
  2>"$W/leak.err"
PID=$(sed -n 's/.*(pid \([0-9]*\)) exited.*/\1/p' "$W/leak.err")
[ -n "$PID" ] || fail "no pid in the run summary: $(cat "$W/leak.err")"
[ -n "$PID" ] && PIDS+=("$PID")
if [ -n "$PID" ] && [ -f "$W/run.$PID.gmem" ]; then
  for v in PYTORCH_NO_CUDA_MEMORY_CACHING=1 XLA_PYTHON_CLIENT_ALLOCATOR=platform GMEM_FRAMEWORKS=pool; do
    grep -aq "$v" "$W/run.$PID.gmem" || fail "the trace does not record $v"
  done
  echo "ok: the saved trace records the framework variables"
else
  fail "no saved trace $W/run.$PID.gmem"
fi

echo "== pytest --gmem applies it as gmem run does (python/gmem/_frameworks.py)"
for vars in "GMEM_FRAMEWORKS=pool" \
  "GMEM_FRAMEWORKS=pool PYTORCH_NO_CUDA_MEMORY_CACHING=0 XLA_PYTHON_CLIENT_PREALLOCATE=true" \
  "GMEM_FRAMEWORKS=observe" "GMEM_FRAMEWORKS=off" "GMEM_FRAMEWORKS=maybe"; do
  # shellcheck disable=SC2086 # VARS is a list of NAME=VALUE words
  env $vars PYTHONPATH="$PWD/python" PYTHONDONTWRITEBYTECODE=1 python3 -m gmem._frameworks \
    >"$W/py.out" 2>"$W/py.err" || fail "python3 -m gmem._frameworks ($vars)"
  # shellcheck disable=SC2086
  env $vars "$GMEM" run -- sh -c "$SHOW" >"$W/gm.out" 2>"$W/gm.err"
  [ "$(grep GMEM_FRAMEWORKS "$W/py.err")" = "$(grep GMEM_FRAMEWORKS "$W/gm.err")" ] ||
    fail "$vars: the plugin says '$(cat "$W/py.err")', gmem run '$(grep GMEM_FRAMEWORKS "$W/gm.err")'"
  for line in $(cat "$W/py.out"); do # what the plugin sets, the program under gmem run saw
    case $line in
      PYTORCH_NO_CUDA_MEMORY_CACHING=*) grep -q "P=${line#*=} " "$W/gm.out" || fail "$vars: $line" ;;
      XLA_PYTHON_CLIENT_ALLOCATOR=*) grep -q "A=${line#*=} " "$W/gm.out" || fail "$vars: $line" ;;
      XLA_PYTHON_CLIENT_PREALLOCATE=*) grep -q "R=${line#*=}\$" "$W/gm.out" || fail "$vars: $line" ;;
      *) fail "$vars: the plugin sets $line, which gmem run does not" ;;
    esac
  done
done
echo "ok: the plugin's plan is gmem run's"

[ $failures -eq 0 ] && echo "frameworks_env_test: all passed"
exit $((failures > 0))
