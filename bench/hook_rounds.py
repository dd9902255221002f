"""What recording adds to the hook path: paired interleaved rounds of `hook_bench`'s pair row on
the fake driver (stacks off, GMEM_TRACE_KEEP=none), trace off against trace on, for one or
more builds of the shim.

Every round runs each configuration once, in an order that rotates and flips every round, each
run pinned with taskset and, when unshare works (root), in a mount namespace with an empty tmpfs
on /dev/shm (no other traces for the retention pass at start). Prints, per route, the trace-off
row's median mean and p99, and for each traced build the median (min-max) over the rounds of
its mean minus the same round's trace-off mean, its p99, and how far the p99 stayed under
2 x trace-off p99 + 200 ns in the worst round (negative: above it). --json adds the rounds.

  python3 bench/hook_rounds.py [--rounds 12] [--cpus 0,1] [--pairs 200000]
      [--lib NAME=PATH]... (default: now=build/lib/libgmem.so; the first gives the off row)
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ROUTES = (("hook-dlsym-sync", "cuMemAlloc_v2 + cuMemFree_v2"),
          ("hook-dlsym-async", "cuMemAllocAsync + cuMemFreeAsync"))


def run(args, lib, trace):
    env = dict(os.environ, LD_LIBRARY_PATH=args.fake_cuda, LD_PRELOAD=lib, GMEM_TRACE=trace,
               GMEM_STACK_DEPTH="0", GMEM_PYTHON_DEPTH="0", GMEM_TRACE_KEEP="none")
    bench = ["taskset", "-c", args.cpus, args.hook_bench, "--tests", "pair", "--sizes", "4K",
             "--threads", "1", "--max-samples", str(args.pairs)]
    if args.unshare:
        cmd = ["unshare", "-m", "sh", "-c",
               'mount -t tmpfs none /dev/shm && exec "$@"', "sh", *bench]
    else:
        cmd = bench
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    rows = {}
    for line in out.stdout.splitlines():
        f = line.split()
        if len(f) >= 14 and f[1] == "pair" and f[6] == "mean" and f[12] == "p99":
            rows[f[0]] = (float(f[7]), float(f[13]))
    missing = [r for r, _ in ROUTES if r not in rows]
    if out.returncode != 0 or missing:
        sys.exit(f"hook_rounds: {' '.join(cmd)} (GMEM_TRACE={trace}, {lib}) gave rc "
                 f"{out.returncode}, rows missing: {missing}\n{out.stderr[-2000:]}")
    return rows


def spread(xs):
    return f"{statistics.median(xs):g} ({min(xs):g}-{max(xs):g})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--cpus", default="0,1")
    ap.add_argument("--pairs", type=int, default=200000)
    ap.add_argument("--lib", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--build", default="build")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    args.hook_bench = os.path.join(args.build, "bench/hook_bench")
    args.fake_cuda = os.path.join(args.build, "tests/fake_cuda")
    libs = [tuple(s.split("=", 1)) for s in args.lib] or [("now", f"{args.build}/lib/libgmem.so")]
    for name, path in libs:
        if not os.path.isfile(path):
            sys.exit(f"hook_rounds: {name}: no {path}")
    if not os.path.isfile(args.hook_bench):
        sys.exit(f"hook_rounds: no {args.hook_bench} (make {args.hook_bench})")
    args.unshare = (os.geteuid() == 0 and shutil.which("unshare") is not None and
                    subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0)
    configs = [("off", libs[0][1], "0")] + [(name, path, "1") for name, path in libs]
    rounds = []
    for r in range(args.rounds):
        k = r % len(configs)
        order = configs[k:] + configs[:k]
        if r % 2:
            order.reverse()
        rounds.append({name: run(args, path, trace) for name, path, trace in order})
    print(f"hook_bench pair 4 KiB, fake driver, stacks off, {args.rounds} rounds, CPUs "
          f"{args.cpus}{', empty /dev/shm each run' if args.unshare else ''}; ns per pair")
    for route, label in ROUTES:
        off_mean = [x["off"][route][0] for x in rounds]
        off_p99 = [x["off"][route][1] for x in rounds]
        print(f"{label}: trace off mean {statistics.median(off_mean):g}, "
              f"p99 {statistics.median(off_p99):g}")
        for name, _ in libs:
            added = [x[name][route][0] - x["off"][route][0] for x in rounds]
            p99 = [x[name][route][1] for x in rounds]
            under = [2 * x["off"][route][1] + 200 - x[name][route][1] for x in rounds]
            print(f"  {name}: on - off mean {spread(added)}, p99 {spread(p99)}, under "
                  f"2 x off + 200 by {min(under):g} at worst")
    if args.json:
        print(json.dumps({"cpus": args.cpus, "rounds": rounds}))


if __name__ == "__main__":
    main()
