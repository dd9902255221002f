#!/usr/bin/env python3
"""Per-allocation cost in a Python process with torch loaded and CUDA initialized: the stacks
gmem records here are deep (libpython, libtorch, the CUDA runtime), which is what the tracing
issue's stack budget is about.

  torch_alloc_cost.py [--pairs N] [--label L]

Allocates and frees tensors of log-uniform sizes 256 B - 4 MiB with 8 live, one pair per
iteration, and prints one JSON line: mean / p50 / p99 / max ns per pair (Python's loop
included; compare runs of the same script). Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so that
every tensor is a cudaMalloc that gmem serves.
"""
import argparse
import json
import math
import random
import time

import torch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pairs", type=int, default=100000)
    ap.add_argument("--label", default="run")
    args = ap.parse_args()
    torch.cuda.init()
    rng = random.Random(7)
    size = lambda: int(2 ** rng.uniform(8, 22))  # noqa: E731
    live = [torch.empty(size(), dtype=torch.uint8, device="cuda") for _ in range(8)]
    for _ in range(1000):  # warm-up: the runtime's first calls, the pool's first segments
        live[0] = torch.empty(size(), dtype=torch.uint8, device="cuda")
    ns = []
    clock = time.perf_counter_ns
    for i in range(args.pairs):
        n = size()
        t0 = clock()
        live[i % 8] = torch.empty(n, dtype=torch.uint8, device="cuda")  # alloc + free the old
        ns.append(clock() - t0)
    torch.cuda.synchronize()
    ns.sort()
    print(json.dumps({"kind": "torch_alloc_cost", "label": args.label, "pairs": args.pairs,
                      "mean_ns": sum(ns) / len(ns), "p50_ns": ns[len(ns) // 2],
                      "p99_ns": ns[len(ns) * 99 // 100], "max_ns": ns[-1],
                      "shared_objects": len(shared_objects())}))


def shared_objects():
    with open("/proc/self/maps") as f:
        return {line.split()[-1] for line in f if ".so" in line}


if __name__ == "__main__":
    main()
