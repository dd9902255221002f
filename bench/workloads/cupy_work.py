#!/usr/bin/env python3
"""CuPy workload: FFT power spectra, matrix products and reductions on arrays whose sizes
change every step (many short-lived temporaries of varying size).

  cupy_work.py --pool on|off --steps N --json OUT
--pool off sets cupy.cuda.set_allocator(None): every array is a cudaMalloc/cudaFree (what gmem
serves when preloaded). --pool on keeps CuPy's default MemoryPool. Prints a checksum per step;
every mode must print the same ones.
"""
import argparse
import os
import random
import sys
import time

import cupy as cp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gmem_probe  # noqa: E402


def step(rng, i):
    n = int(2 ** rng.uniform(16, 26))
    m = rng.randint(256, 4096)
    g = cp.random.default_rng(i)
    x = g.standard_normal(n, dtype=cp.float32)
    spec = cp.abs(cp.fft.rfft(x)) ** 2
    a = g.standard_normal((m, m), dtype=cp.float32)
    b = a @ a.T + cp.eye(m, dtype=cp.float32)
    c = cp.tanh(b[: m // 2]) * 0.5 + cp.sqrt(cp.abs(b[m // 2:]))[: m // 2]
    return float(spec.sum() / n + c.mean())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pool", choices=("on", "off"), default="on")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--mode", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.pool == "off":
        cp.cuda.set_allocator(None)
    pool = cp.get_default_memory_pool()
    rng = random.Random(7)
    sums = [step(rng, i) for i in range(args.warmup)]
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    peak_pool = 0
    for i in range(args.warmup, args.warmup + args.steps):
        sums.append(step(rng, i))
        peak_pool = max(peak_pool, pool.total_bytes())
    cp.cuda.Device().synchronize()
    elapsed = time.perf_counter() - t0
    rec = {"kind": "workload", "framework": "cupy", "workload": "cupy-fft-matmul",
           "mode": args.mode, "steps": args.steps, "seconds": elapsed,
           "steps_per_s": args.steps / elapsed, "losses": sums,
           "framework_peak_reserved": peak_pool if args.pool == "on" else None,
           "env": {k: v for k, v in os.environ.items() if k.startswith("GMEM_") or
                   k == "LD_PRELOAD"}, "cupy": cp.__version__}
    gmem_probe.emit(rec, args.json)


if __name__ == "__main__":
    main()
