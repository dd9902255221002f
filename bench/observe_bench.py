"""gmem's own host time per observed tensor event (allocation or free, stacks included) with
realistic stacks, on the fake driver: no GPU and no PyTorch needed.

Each run is a Python process under the shim that observes alloc+free pairs the way the CuPy
bootstrap does (gmem_observe_alloc / gmem_observe_free through ctypes, which captures native and
Python frames as the PyTorch tracker does) from a handful of call sites, 33-35 Python frames
deep with the interpreter re-entered every fifth frame (through map(): 41 native frames through
libpython, libffi and ctypes, besides the shim's own); gmem records the innermost 16 of each
(GMEM_STACK_DEPTH, GMEM_PYTHON_DEPTH).

Two measures per run, after the same counted loop:
- added per event, fastest batches: 100 batches of 200 pairs alternate with batches of the same
  calls passing address 0 (which the shim returns from at once: the same Python work and ctypes
  calls, none of gmem's); the fastest batch of each kind is one no other process interrupted,
  and their difference per event is what observing adds. It holds on a loaded machine.
- the shim's counters (GMEM_VERBOSE=1's `gmem: observe` line: from the observer's entry to the
  event written, what the GPU hosts report): a run of WARMUP pairs subtracted from one of
  WARMUP + --pairs (rules learned, strings interned and first pages touched left out), scaled
  by the share of the loop's wall time the process spent on its CPU (--raw: not). Time off
  the CPU still lands in these spans, so on a loaded machine they spread widely.

Runs are paired and interleaved: every round runs each library (A B, then B A, ...) in each
configuration; the table gives the median over the rounds and their min-max. --split adds the
configurations that split the cost: stacks off (GMEM_STACK_DEPTH=0 GMEM_PYTHON_DEPTH=0: the
live table and the event write), native frames only (GMEM_PYTHON_DEPTH=0) and Python frames
only (GMEM_STACK_DEPTH=0). For instruction counts, run `--child --batches 0` under callgrind
(bench/results/README.md).

  taskset -c 1 python3 bench/observe_bench.py [--gmem-lib build/lib/libgmem.so]...
      [--fake-cuda build/tests/fake_cuda] [--rounds 6] [--pairs 100000] [--sites 5] [--split]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

OBSERVE = re.compile(r"^gmem: observe allocs=(\d+) alloc_ns=(\d+) frees=(\d+) free_ns=(\d+)", re.M)
DEPTH = 28  # level() frames between the loop and a call site (map() re-entries add more)
WARMUP = 2000  # pairs of the warm-up run subtracted
BATCHES, BATCH = 100, 200  # the batched runs after the counted loop: 100 x 200 pairs of each
CORRECT = True  # scale by the share of time on CPU (--raw: not)
REENTER = 5  # every fifth frame calls the next one through map(): the interpreter re-entered


def child(pairs, sites, batches):
    import ctypes
    import time

    cuda = ctypes.CDLL("libcuda.so.1")
    gmem = ctypes.CDLL(None)  # libgmem.so is preloaded
    assert cuda.cuInit(0) == 0
    ctx = ctypes.c_void_p()
    assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
    assert cuda.cuCtxSetCurrent(ctx) == 0
    assert gmem.gmem_observe_enable(1) == 1, "the shim is not recording"
    alloc, free = gmem.gmem_observe_alloc, gmem.gmem_observe_free
    alloc.argtypes = [ctypes.c_size_t] * 3 + [ctypes.c_int, ctypes.c_size_t]
    free.argtypes = [ctypes.c_size_t, ctypes.c_int]
    base, live = 0x7F0000000000, 8  # each pair frees the block allocated `live` pairs earlier

    # The call sites: each allocates on its own line, from 0, 1 or 2 helper frames further down.
    def site0(a):
        alloc(a, 4096, 4096, 0, 0)

    def site1(a):
        alloc(a, 8192, 8192, 0, 0)

    def site2(a):
        return helper(a, 16384)

    def site3(a):
        return helper(a, 65536)

    def site4(a):
        return helper2(a)

    def helper(a, size):
        alloc(a, size, size, 0, 0)

    def helper2(a):
        return helper(a, 1 << 20)

    site_fns = [site0, site1, site2, site3, site4][:sites]

    on = [1]  # 0: every call passes address 0, which the shim returns from at once

    def level(n, i):
        if n == 0:
            site_fns[i % len(site_fns)]((base + (i % (2 * live)) * 4096) * on[0])
            if i >= live:
                free((base + ((i - live) % (2 * live)) * 4096) * on[0], 0)
            return 0
        if n % REENTER == 0:
            return list(map(level, (n - 1,), (i,)))[0]
        return level(n - 1, i)

    t0, c0 = time.perf_counter_ns(), time.process_time_ns()
    for i in range(pairs + live):
        level(DEPTH, i)
    wall, cpu = time.perf_counter_ns() - t0, time.process_time_ns() - c0
    print(f"observe_bench: {wall / (pairs + live):.0f} ns per pair in Python (wall), "
          f"on CPU {cpu / max(wall, 1):.4f} of it")
    # The same pairs in batches, each after a batch of the same calls with address 0 (the
    # Python work and the ctypes calls alike, gmem's work none): the fastest batch of each kind
    # is one no other process interrupted, and their difference is what observing adds.
    best = {0: None, 1: None}
    for b in range(batches):
        for o in (0, 1):
            on[0] = o
            t0 = time.perf_counter_ns()
            for i in range(b * BATCH, (b + 1) * BATCH):
                level(DEPTH, i)
            dt = time.perf_counter_ns() - t0
            best[o] = dt if best[o] is None else min(best[o], dt)
    if batches > 0:
        print(f"observe_bench: {(best[1] - best[0]) / (2 * BATCH):.0f} ns per event added "
              f"(fastest batches)")


CONFIGS = {
    "defaults": {},
    "stacks off": {"GMEM_STACK_DEPTH": "0", "GMEM_PYTHON_DEPTH": "0"},
    "native only": {"GMEM_PYTHON_DEPTH": "0"},
    "python only": {"GMEM_STACK_DEPTH": "0"},
}


def run_once(lib, fake_cuda, config, pairs, sites):
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("GMEM_"):
            del env[k]
    env.update(CONFIGS[config])
    env["GMEM_VERBOSE"] = "1"
    env["GMEM_TRACE_KEEP"] = "none"  # the runs' traces go with them
    env["LD_PRELOAD"] = os.path.abspath(lib)
    env["LD_LIBRARY_PATH"] = os.path.abspath(fake_cuda) + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--pairs", str(pairs),
           "--sites", str(sites), "--batches", str(BATCHES)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    m = OBSERVE.search(r.stderr)
    if r.returncode != 0 or m is None:
        sys.exit(f"observe_bench: {lib} ({config}): exit status {r.returncode}, no observe "
                 f"line\n{r.stderr[-2000:]}")
    allocs, alloc_ns, frees, free_ns = map(int, m.groups())
    w = re.search(r"(\d+) ns per pair in Python \(wall\), on CPU ([0-9.]+)", r.stdout)
    # Time the process spent off its CPU (another process ran) lands in gmem's spans as often
    # as gmem's share of the run: the counters are scaled by the share of time on CPU.
    on_cpu = min(float(w.group(2)), 1.0) if w and CORRECT else 1.0
    batched = re.search(r"(-?\d+) ns per event added", r.stdout)
    return (allocs, allocs * alloc_ns * on_cpu, frees, frees * free_ns * on_cpu,
            int(w.group(1)) if w else 0, int(batched.group(1)) if batched else 0)


def measure(lib, fake_cuda, config, pairs, sites):
    """The pairs' own cost, warm-up left out: a run of WARMUP pairs (rules learned, strings
    interned, the trace's first pages touched) subtracted from a run of WARMUP + pairs."""
    a0, at0, f0, ft0, _, _ = run_once(lib, fake_cuda, config, WARMUP, sites)
    a1, at1, f1, ft1, wall, batched = run_once(lib, fake_cuda, config, WARMUP + pairs, sites)
    # The batched pairs ran in both runs: they cancel out of the counters' difference.
    alloc, free = (at1 - at0) / (a1 - a0), (ft1 - ft0) / (f1 - f0)
    return {"alloc": alloc, "free": free, "event": (alloc + free) / 2, "pair_wall": wall,
            "batched": batched}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--gmem-lib", action="append", default=[])
    p.add_argument("--fake-cuda", default="build/tests/fake_cuda")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--pairs", type=int, default=100000)
    p.add_argument("--sites", type=int, default=5, choices=range(1, 6))
    p.add_argument("--split", action="store_true")
    p.add_argument("--child", action="store_true")
    p.add_argument("--batches", type=int, default=BATCHES, help="batched pairs after the counted "
                   "ones (0: none, e.g. under valgrind, whose counts need no batches)")
    p.add_argument("--raw", action="store_true", help="counters as they are, not scaled by the "
                   "share of time on CPU (on a machine that runs nothing else)")
    a = p.parse_args()
    global CORRECT
    CORRECT = not a.raw
    if a.child:
        child(a.pairs, a.sites, a.batches)
        return
    libs = a.gmem_lib or ["build/lib/libgmem.so"]
    configs = ["defaults"] + (["stacks off", "native only", "python only"] if a.split else [])
    res = {(lib, c): [] for lib in libs for c in configs}
    for r in range(a.rounds):
        order = libs if r % 2 == 0 else libs[::-1]  # A B, B A, A B...
        for c in configs:
            for lib in order:
                res[(lib, c)].append(measure(lib, a.fake_cuda, c, a.pairs, a.sites))
    print(f"observe_bench: {a.rounds} rounds x {a.pairs} alloc+free pairs from {a.sites} call "
          f"sites, {DEPTH + 5}-{DEPTH + 7} Python frames; ns per event, median (min-max). The "
          f"counters' columns subtract two runs: on a loaded machine only the first column holds")
    print("| library | configuration | added per event, fastest batches | shim's counters: per "
          "event | alloc | free | Python wall per pair |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for lib in libs:
        for c in configs:
            rows = res[(lib, c)]

            def cell(key):
                v = [x[key] for x in rows]
                return f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})"

            print(f"| {lib} | {c} | {cell('batched')} | {cell('event')} | {cell('alloc')} | "
                  f"{cell('free')} | {cell('pair_wall')} |")


if __name__ == "__main__":
    main()
