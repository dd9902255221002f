#!/usr/bin/env python3
"""Runs the real workloads (bench/workloads/) under each allocator mode, one process per run,
while a thread samples the device's used memory through NVML every millisecond.

  run_workloads.py --out DIR [--gmem-lib PATH] [--reps N] [--only SUBSTR,...] [--record-traces]

Each run appends one JSON line to DIR/workloads.jsonl: what the workload printed, plus
nvml_peak_delta (peak device memory used during the run minus the idle level before it; it
includes the CUDA context and library workspaces, and is the only figure that sees every
allocator, gmem's pool included), wall time, return code and the environment it ran with.
"""
import argparse
import json
import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
W = os.path.join(HERE, "workloads")
NOCACHE = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}

# Tracing modes for part 4: GMEM_TRACE turns the recorder on, GMEM_STACK_DEPTH=0 turns stack
# capture off (names from common/options.h).
TRACE_OFF = {"GMEM_TRACE": "0"}
TRACE_NOSTACK = {"GMEM_TRACE": "1", "GMEM_STACK_DEPTH": "0"}
TRACE_STACKS = {"GMEM_TRACE": "1"}


def torch_modes(model, steps):
    cmd = [sys.executable, os.path.join(W, "torch_train.py"), "--model", model, "--steps",
           str(steps)]
    return [
        ("a", "torch caching allocator", cmd, {}, False),
        ("a-expandable", "expandable_segments:True", cmd,
         {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, False),
        ("d", "backend:cudaMallocAsync", cmd,
         {"PYTORCH_CUDA_ALLOC_CONF": "backend:cudaMallocAsync"}, False),
        ("b", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", cmd, NOCACHE, False),
        ("c", "no caching + gmem", cmd, {**NOCACHE, **TRACE_OFF}, True),
        # What each of gmem's two ways to stay off the host's critical path is worth:
        # GMEM_VMM=0 gives segments back with cuMemFree (waits for the device), and with
        # GMEM_BARRIERS=0 too every pool fence is a cuCtxSynchronize.
        ("c-novmm", "no caching + gmem, GMEM_VMM=0", cmd,
         {**NOCACHE, **TRACE_OFF, "GMEM_VMM": "0"}, True),
        ("c-sync", "no caching + gmem, GMEM_VMM=0 GMEM_ARENA=0 GMEM_BARRIERS=0", cmd,
         {**NOCACHE, **TRACE_OFF, "GMEM_VMM": "0", "GMEM_ARENA": "0", "GMEM_BARRIERS": "0"}, True),
        # Without the arena (GMEM_ARENA=0): segments that the pool reshapes.
        ("c-noarena", "no caching + gmem, GMEM_ARENA=0", cmd,
         {**NOCACHE, **TRACE_OFF, "GMEM_ARENA": "0"}, True),
        ("c-trace", "no caching + gmem, trace on, stacks off", cmd, {**NOCACHE, **TRACE_NOSTACK},
         True),
        ("c-trace-stacks", "no caching + gmem, trace on, stacks on", cmd,
         {**NOCACHE, **TRACE_STACKS}, True),
    ]


def all_runs(args):
    runs = []
    for model, steps in (("gpt", args.gpt_steps), ("convnet", args.convnet_steps),
                         ("smallconv", args.smallconv_steps)):
        for mode, desc, cmd, env, gmem in torch_modes(model, steps):
            runs.append((f"torch-{model}", mode, desc, cmd, env, gmem))
    cupy = [sys.executable, os.path.join(W, "cupy_work.py"), "--steps", str(args.cupy_steps)]
    runs += [("cupy", "pool", "CuPy MemoryPool", cupy + ["--pool", "on"], {}, False),
             ("cupy", "nopool", "pool off (cudaMalloc per array)", cupy + ["--pool", "off"], {},
              False),
             ("cupy", "nopool+gmem", "pool off + gmem", cupy + ["--pool", "off"], TRACE_OFF,
              True),
             ("cupy", "nopool+gmem-noarena", "pool off + gmem, GMEM_ARENA=0",
              cupy + ["--pool", "off"], {**TRACE_OFF, "GMEM_ARENA": "0"}, True),
             ("cupy", "nopool+gmem-trace", "pool off + gmem, trace on, stacks off",
              cupy + ["--pool", "off"], TRACE_NOSTACK, True)]
    jax = [sys.executable, os.path.join(W, "jax_work.py"), "--steps", str(args.jax_steps)]
    platform = {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}
    runs += [("jax", "bfc", "XLA BFC, preallocate 75%", jax, {}, False),
             ("jax", "bfc-grow", "XLA BFC, XLA_PYTHON_CLIENT_PREALLOCATE=false", jax,
              {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, False),
             ("jax", "platform", "XLA_PYTHON_CLIENT_ALLOCATOR=platform", jax, platform, False),
             ("jax", "platform+gmem", "platform + gmem", jax, {**platform, **TRACE_OFF}, True)]
    return runs


def matches(key, pattern):
    """'workload/mode' against a --only/--reps-only item: a substring, or 'x$' for exactly x."""
    return key == pattern[:-1] if pattern.endswith("$") else pattern in key


class Sampler:
    """Peak of NVML's used memory on the workload's device, sampled every ~1 ms on a thread:
    the first device CUDA_VISIBLE_DEVICES names (an index, with CUDA_DEVICE_ORDER=PCI_BUS_ID so
    that CUDA's and NVML's numbering agree, or a GPU-... UUID), else device 0."""

    def __init__(self):
        import pynvml
        pynvml.nvmlInit()
        self.nvml = pynvml
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
        if first.startswith("GPU-"):
            self.h = pynvml.nvmlDeviceGetHandleByUUID(first)
        else:
            if first.isdigit() and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
                sys.exit("Sampler: CUDA_VISIBLE_DEVICES by index needs CUDA_DEVICE_ORDER=PCI_BUS_ID")
            self.h = pynvml.nvmlDeviceGetHandleByIndex(int(first) if first.isdigit() else 0)
        self.peak = 0
        self.stop_flag = False

    def used(self):
        return self.nvml.nvmlDeviceGetMemoryInfo(self.h).used

    def baseline(self):
        vals = []
        for _ in range(20):
            vals.append(self.used())
            time.sleep(0.005)
        return sorted(vals)[len(vals) // 2]

    def start(self):
        self.peak, self.stop_flag = 0, False
        self.t = threading.Thread(target=self.loop, daemon=True)
        self.t.start()

    def loop(self):
        while not self.stop_flag:
            self.peak = max(self.peak, self.used())
            time.sleep(0.001)

    def stop(self):
        self.stop_flag = True
        self.t.join()
        return self.peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gmem-lib", default="")
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--only", default="", help="comma-separated substrings of 'workload/mode'")
    ap.add_argument("--reps-only", default="",
                    help="repetitions after the first only for these 'workload/mode' substrings")
    ap.add_argument("--record-traces", action="store_true",
                    help="also run each torch workload once recording its allocation trace")
    ap.add_argument("--gpt-steps", type=int, default=40)
    ap.add_argument("--convnet-steps", type=int, default=30)
    ap.add_argument("--smallconv-steps", type=int, default=300)
    ap.add_argument("--cupy-steps", type=int, default=200)
    ap.add_argument("--jax-steps", type=int, default=120)
    ap.add_argument("--timeout", type=int, default=240)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    jsonl = os.path.join(args.out, "workloads.jsonl")
    try:
        sampler = Sampler()
    except Exception as e:  # noqa: BLE001
        print(f"run_workloads: NVML unavailable ({e}); nvml_peak_delta will be missing")
        sampler = None
    runs = all_runs(args)
    if args.record_traces:
        for model in ("gpt", "convnet"):
            path = os.path.join(args.out, f"trace-torch-{model}.txt")
            cmd = [sys.executable, os.path.join(W, "torch_train.py"), "--model", model, "--steps",
                   str(args.gpt_steps if model == "gpt" else args.convnet_steps),
                   "--record-trace", path]
            runs.append((f"torch-{model}", "a-record", "caching allocator, memory history on",
                         cmd, {}, False))
    only = [s for s in args.only.split(",") if s]
    for rep in range(args.reps):
        for workload, mode, desc, cmd, env, gmem in runs:
            key = f"{workload}/{mode}"
            if only and not any(matches(key, s) for s in only):
                continue
            if gmem and not args.gmem_lib:
                continue
            if mode == "a-record" and rep > 0:
                continue
            more = [x for x in args.reps_only.split(",") if x]
            if rep > 0 and more and not any(matches(key, x) for x in more):
                continue
            e = dict(os.environ)
            for k in list(e):  # every mode starts from the same clean allocator settings
                if k.startswith(("PYTORCH_CUDA_ALLOC", "PYTORCH_NO_CUDA", "XLA_PYTHON", "GMEM_")):
                    del e[k]
            e.update(env)
            e["PYTHONUNBUFFERED"] = "1"
            if gmem and rep == 0 and mode in ("c-trace", "nopool+gmem-trace"):
                # gmem's own trace of the run, for part 3 (bench/report.py exports and replays it)
                e["GMEM_TRACE_SAVE"] = os.path.abspath(
                    os.path.join(args.out, f"gmemtrace-{workload}.bin"))
            if gmem:
                e["GMEM_VERBOSE"] = "1"  # counters and substitution counts at exit, to the log
                e["LD_PRELOAD"] = os.path.abspath(args.gmem_lib)
                e["BENCH_GMEM_LIB"] = os.path.abspath(args.gmem_lib)
            tmp = os.path.join(args.out, "tmp-run.jsonl")
            if os.path.exists(tmp):
                os.remove(tmp)
            base = sampler.baseline() if sampler else 0
            if sampler:
                sampler.start()
            t0 = time.perf_counter()
            try:
                p = subprocess.run(cmd + ["--mode", mode, "--json", tmp], env=e,
                                   capture_output=True, text=True, timeout=args.timeout)
                rc, out, err = p.returncode, p.stdout, p.stderr
            except subprocess.TimeoutExpired as ex:
                rc, out, err = 124, str(ex.stdout or ""), str(ex.stderr or "") + "\ntimeout"
            wall = time.perf_counter() - t0
            peak = sampler.stop() if sampler else 0
            rec = {}
            if rc == 0 and os.path.exists(tmp):
                with open(tmp) as f:
                    rec = json.loads(f.readline())
            rec.update({"kind": "workload", "workload": workload, "mode": mode,
                        "description": desc, "rep": rep, "returncode": rc, "wall_s": wall,
                        "command": " ".join(f"{k}={v}" for k, v in env.items()) +
                        (f" LD_PRELOAD={args.gmem_lib}" if gmem else "") + " " +
                        " ".join(os.path.relpath(c) if c.startswith("/") and HERE in c else c
                                 for c in cmd[1:]),
                        "nvml_baseline": base, "nvml_peak_delta": max(0, peak - base)})
            if rc != 0:
                rec["stderr_tail"] = err[-3000:]
            os.makedirs(os.path.join(args.out, "logs"), exist_ok=True)
            with open(os.path.join(args.out, "logs", f"{workload}-{mode}-{rep}.log"), "w") as f:
                f.write(out[-20000:] + "\n--- stderr ---\n" + err[-20000:])
            with open(jsonl, "a") as f:
                f.write(json.dumps(rec) + "\n")
            sps = rec.get("steps_per_s")
            print(f"{key:34s} rep {rep} rc {rc} {wall:6.1f}s  steps/s "
                  f"{sps if sps is None else round(sps, 2)}  nvml peak "
                  f"{rec['nvml_peak_delta'] / 2**30:.2f} GiB", flush=True)
            if rc != 0:
                print(err[-1500:], flush=True)


if __name__ == "__main__":
    main()
