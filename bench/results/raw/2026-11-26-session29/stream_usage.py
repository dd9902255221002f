#!/usr/bin/env python3
"""Session 29: which CUDA streams does the fast-step convnet's work run on?

  stream_usage.py --steps N --out TRACE.json

Runs torch_train.py's smallconv for 5 warm-up steps, then N steps under torch.profiler (CUDA
activity), and prints, per stream id of the profiler's trace, how many kernels, copies and
sets ran there. Which allocator runs it is the environment's (LD_PRELOAD, PYTORCH_*).
"""
import argparse
import collections
import json
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../workloads"))
import torch  # noqa: E402
import torch_train  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.manual_seed(1234)
    torch.backends.cudnn.benchmark = False  # as torch_train.py sets them for smallconv
    torch.backends.cudnn.deterministic = True
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    step = torch_train.smallconv_setup(random.Random(1234))
    for i in range(5):
        step(i).item()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for i in range(5, 5 + a.steps):
            step(i)
        torch.cuda.synchronize()
    prof.export_chrome_trace(a.out)
    with open(a.out) as f:
        events = json.load(f)["traceEvents"]
    per = collections.Counter()
    for e in events:
        cat = e.get("cat", "")
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            per[(e.get("args", {}).get("stream"), cat)] += 1
    streams = sorted({s for s, _ in per}, key=lambda s: (s is None, s))
    print(f"{a.steps} steps; streams with device work: {len(streams)}")
    for s in streams:
        print(f"  stream {s}: " + ", ".join(f"{c} {per[(s, c)]}" for c in
                                           ("kernel", "gpu_memcpy", "gpu_memset")))


if __name__ == "__main__":
    main()
