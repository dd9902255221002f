#!/bin/bash
# Session 27, call 9: make test-gpu and PyTorch's _memory_viz on gmem's export with the final
# build (.device/build from scripts/gpu-bundle.sh at 7071808, the final code: event lanes, 16 live-table
# shards, the lane in scalar TLS). Carried: .device/build.
set -u
start=$SECONDS
OUT=$OUT/session bash scripts/gpu-session.sh tests > $OUT/c9-test-gpu-session.log 2>&1
cp $OUT/session/test-gpu.log $OUT/c9-test-gpu.log 2>/dev/null
rm -rf $OUT/session
echo "elapsed $((SECONDS - start)) s" >> $OUT/c9-test-gpu-session.log
ls /dev/shm > $OUT/c9-shm-after.log
