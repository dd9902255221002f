#!/bin/bash
# Session 27, call 7: make test-gpu and PyTorch's _memory_viz on gmem's export with the final
# build (.device/build from scripts/gpu-bundle.sh at a416e3c: event lanes, 16 live-table
# shards, the lane in scalar TLS). Carried: .device/build.
set -u
start=$SECONDS
OUT=$OUT/session bash scripts/gpu-session.sh tests > $OUT/c7-test-gpu-session.log 2>&1
cp $OUT/session/test-gpu.log $OUT/c7-test-gpu.log 2>/dev/null
rm -rf $OUT/session
echo "elapsed $((SECONDS - start)) s" >> $OUT/c7-test-gpu-session.log
ls /dev/shm > $OUT/c7-shm-after.log
