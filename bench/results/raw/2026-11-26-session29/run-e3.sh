#!/bin/bash
# Session 29, call 3: can a barrier's per-stream driver calls run in parallel from several
# threads? barrier_fanout.cu (built here: nvcc -O2 -std=c++17 -arch=sm_90 barrier_fanout.cu
# -lcuda -o .device/exp/barrier_fanout), twice, cores 2-9. Carried: .device/exp.
nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2; do taskset -c 2-9 .device/exp/barrier_fanout; done 2>&1 | tee $OUT/e3.log
