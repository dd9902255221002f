#!/bin/bash
# Session 29, call 11: make test-gpu on the final library (ce46ecb's bundle: the one-compare scan
# and the give-back to the bounds), with PyTorch's _memory_viz on gmem's export
# (scripts/gpu-session.sh tests). Carried: .device/build.
OUT=$OUT bash scripts/gpu-session.sh tests > $OUT/e11-test-gpu-session.log 2>&1
tail -3 $OUT/e11-test-gpu-session.log
