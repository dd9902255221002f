#!/usr/bin/env bash
# Session 21, GPU call C: make test-gpu on the bundle (+ PyTorch's viewer check), then the fake-driver
# Python-frame test under this machine's CPython (3.12). Logs to $OUT.
set -u
B=$PWD/.device/build
L=$OUT
S_OUT=/tmp/gl; rm -rf $S_OUT; mkdir -p $S_OUT
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $L/summary.txt
python3 --version >> $L/summary.txt 2>&1
start=$SECONDS
BUILD=$B OUT=$S_OUT timeout ${TESTS_S:-420} scripts/gpu-session.sh tests > $L/session.log 2>&1
echo "session rc=$? after $((SECONDS - start)) s" >> $L/summary.txt
grep -E "^(ok|FAIL|skip|tests:|memory_viz)" $L/session.log >> $L/summary.txt
GMEM_BUILD=$B timeout 120 bash tests/python/python_frames_test.sh > $L/fake_python312.log 2>&1
echo "fake python_frames_test (python 3.12) rc=$?" >> $L/summary.txt
grep -E "FAIL|PASS|failures" $L/fake_python312.log >> $L/summary.txt
echo "total $((SECONDS - start)) s" >> $L/summary.txt
cp $S_OUT/test-logs/python_frames_test.log $S_OUT/test-logs/ipc_test.log $L/ 2>/dev/null
tar czf $OUT/logs.tgz -C $S_OUT . 2>/dev/null
