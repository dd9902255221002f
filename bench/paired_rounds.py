#!/usr/bin/env python3
"""Paired interleaved rounds: one workload under several allocator configurations, each round
running every configuration once, the order reversed every other round (A B C, then C B A), so
that a host that drifts during the call moves every configuration alike.

  paired_rounds.py --out DIR --gmem-lib PATH --rounds N [--only NAME,...] [--taskset CPUS]
                   [--budget-s S] WORKLOAD [ARGS...]

WORKLOAD is torch_train.py's model (gpt, convnet, smallconv, decode,
generate), or cupy
(workloads/cupy_work.py) or jax (workloads/jax_work.py), and ARGS go to it (e.g. --steps 300).
The configurations of a PyTorch model (--only picks some; the first one named is the peer the
others are compared with):
  caching          PyTorch's caching allocator (what every user has)
  expandable       PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  gmem             PYTORCH_NO_CUDA_MEMORY_CACHING=1 under gmem with its default options
                   (trace and stacks on)
  gmem-traceoff    the same with GMEM_TRACE=0
  gmem-fanout      gmem's defaults with GMEM_CONTEXT_BARRIER=0 (every barrier a fan-out)
  gmem-nomarks     gmem's defaults with GMEM_FENCE_MARKS=0 (every fence a barrier)
  gmem-stitch      gmem's defaults with GMEM_STITCH=1 (free arena pages stitched into ranges)
  gmem-stitch-keep0  the same with GMEM_STITCH_KEEP=0 (a freed range given back at once)
  gmem-observe     gmem with nothing set (what `gmem run` gives a PyTorch program): PyTorch's
                   caching allocator kept and each tensor observed (GMEM_FRAMEWORKS=observe)
  torch-history    PyTorch's caching allocator with its own recorder on for the whole run:
                   torch.cuda.memory._record_memory_history(stacks="python")
  torch-history-all  the same with stacks="all" (Python, TorchScript and C++ frames)
--taskset CPUS runs every process under `taskset -c CPUS`. --budget-s S starts no new round
once S seconds have passed (the rounds run are reported; 0 = no budget).
cupy's: cupy-pool (CuPy's own MemoryPool, no gmem), gmem (--pool off: every array a
cudaMalloc/cudaFree that gmem serves), gmem-stitch, gmem-stitch-keep0. jax's: jax-bfc (XLA's
BFC pool, preallocating), jax-ondemand (BFC grown on demand), gmem (XLA_PYTHON_CLIENT_ALLOCATOR=
platform under gmem, what `gmem run` gives a JAX program), gmem-stitch, gmem-stitch-keep0.
Each run appends a JSON line to DIR/rounds.jsonl (steps/s, NVML peak above idle, a hash of the
losses, the mean and p99 step period from timing events, the five slowest steps by those events
and by the host's clock); at the end one summary line per
configuration: mean steps/s, the per-round ratio to the peer (median, min, max), the mean step
period and its p99 (median and max over rounds), the per-round ratios of the mean and p99 step
periods to the peer's (median, min, max), the indices of each round's two slowest steps, NVML
peak (max over rounds), whether every run printed
the same losses as the peer, and under gmem its own host time from the shim's counters
(GMEM_VERBOSE's "gmem: observe" line: ns per observed allocation and free, stacks included, and
their share of the run's wall time). The summaries also go to DIR/summary.json.
"""
import argparse
import hashlib
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from run_workloads import Sampler  # noqa: E402

NOCACHE = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
CONFIGS = {
    "caching": ({}, False),
    "expandable": ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, False),
    "gmem": (NOCACHE, True),
    "gmem-traceoff": ({**NOCACHE, "GMEM_TRACE": "0"}, True),
    "gmem-fanout": ({**NOCACHE, "GMEM_CONTEXT_BARRIER": "0"}, True),
    "gmem-nomarks": ({**NOCACHE, "GMEM_FENCE_MARKS": "0"}, True),
    "gmem-stitch": ({**NOCACHE, "GMEM_STITCH": "1"}, True),
    "gmem-stitch-keep0": ({**NOCACHE, "GMEM_STITCH": "1", "GMEM_STITCH_KEEP": "0"}, True),
    "gmem-observe": ({}, True),
    "torch-history": ({"BENCH_TORCH_HISTORY": "python"}, False),
    "torch-history-all": ({"BENCH_TORCH_HISTORY": "all"}, False),
}
STITCH = {"GMEM_STITCH": "1"}
KEEP0 = {"GMEM_STITCH": "1", "GMEM_STITCH_KEEP": "0"}
PLATFORM = {"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}
# Other frameworks' workloads: script, and per configuration (environment, under gmem, the
# script's own arguments).
FRAMEWORKS = {
    "cupy": ("cupy_work.py", {
        "cupy-pool": ({}, False, ["--pool", "on"]),
        "gmem": ({}, True, ["--pool", "off"]),
        "gmem-stitch": (STITCH, True, ["--pool", "off"]),
        "gmem-stitch-keep0": (KEEP0, True, ["--pool", "off"]),
    }),
    "jax": ("jax_work.py", {
        "jax-bfc": ({}, False, []),
        "jax-ondemand": ({"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, False, []),
        "gmem": (PLATFORM, True, []),
        "gmem-stitch": ({**PLATFORM, **STITCH}, True, []),
        "gmem-stitch-keep0": ({**PLATFORM, **KEEP0}, True, []),
    }),
}


def configs_of(workload):
    if workload in FRAMEWORKS:
        return FRAMEWORKS[workload][1]
    return {n: (env, gmem, []) for n, (env, gmem) in CONFIGS.items()}


def verbose_counters(stderr, name):
    """The counters of the shim's GMEM_VERBOSE "gmem: NAME k=v ..." line, or None: "observe"
    (its own time per observed event), "trace_growth" (the trace's growths and the hooks'
    waits for them)."""
    for line in stderr.splitlines():
        if line.startswith(f"gmem: {name} "):
            return {k: float(v) for k, v in re.findall(r"(\w+)=([0-9.]+)", line)}
    return None


def run_one(name, args, workload_args, sampler):
    env_add, gmem, script_args = configs_of(args.workload)[name]
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("PYTORCH_CUDA_ALLOC", "PYTORCH_NO_CUDA", "GMEM_", "LD_PRELOAD",
                              "BENCH_TORCH_HISTORY", "XLA_PYTHON_CLIENT"))}
    e.update(env_add)
    e["PYTHONUNBUFFERED"] = "1"
    if gmem:
        e["LD_PRELOAD"] = os.path.abspath(args.gmem_lib)
        e["GMEM_VERBOSE"] = "1"
    tmp = os.path.join(args.out, "tmp-run.json")
    if os.path.exists(tmp):
        os.remove(tmp)
    if args.workload in FRAMEWORKS:
        cmd = [sys.executable, os.path.join(HERE, "workloads", FRAMEWORKS[args.workload][0]),
               *script_args, *workload_args, "--mode", name, "--json", tmp]
    else:
        cmd = [sys.executable, os.path.join(HERE, "workloads", "torch_train.py"), "--model",
               args.workload, *workload_args, "--mode", name, "--json", tmp]
    if args.taskset:
        cmd = ["taskset", "-c", args.taskset, *cmd]
    base = sampler.baseline() if sampler else 0
    if sampler:
        sampler.start()
    p = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=args.timeout)
    peak = sampler.stop() if sampler else 0
    rec = {"config": name, "rc": p.returncode}
    try:
        with open(tmp) as f:
            w = json.loads(f.readline())
        rec["steps_per_s"] = w["steps_per_s"]
        rec["step_ms_mean"], rec["step_ms_p99"] = w.get("step_ms_mean"), w.get("step_ms_p99")
        for key in ("step_ms_slowest", "host_step_ms_slowest"):
            if key in w:
                rec[key] = w[key]
        rec["losses_md5"] = hashlib.md5(json.dumps(w["losses"]).encode()).hexdigest()[:12]
    except (OSError, ValueError, KeyError):
        rec["error"] = (p.stdout + p.stderr)[-2000:]
    rec["nvml_peak_delta_mib"] = (peak - base) / 2**20 if sampler else None
    rec["gmem_observe"] = verbose_counters(p.stderr, "observe") if gmem else None
    rec["gmem_growth"] = verbose_counters(p.stderr, "trace_growth") if gmem else None
    rec["gmem_lines"] = [line for line in p.stderr.splitlines()
                         if line.startswith(("gmem: barriers", "gmem: pool device=0 kind=device",
                                             "gmem: vmm device=0", "gmem: host_time device=0",
                                             "gmem: slow_path device=0"))]
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--gmem-lib", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--only", default="caching,gmem,gmem-traceoff")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--taskset", default="")
    ap.add_argument("--budget-s", type=float, default=0)
    ap.add_argument("workload")
    args, workload_args = ap.parse_known_args()
    os.makedirs(args.out, exist_ok=True)
    names = [n for n in args.only.split(",") if n]
    known = configs_of(args.workload)
    for n in names:
        if n not in known:
            sys.exit(f"paired_rounds: unknown configuration '{n}' for {args.workload} "
                     f"(known: {', '.join(known)})")
    try:
        sampler = Sampler()
    except Exception as ex:  # noqa: BLE001
        print(f"paired_rounds: NVML unavailable ({ex}); no memory figures", file=sys.stderr)
        sampler = None
    rows = {n: [] for n in names}
    began = time.monotonic()
    with open(os.path.join(args.out, "rounds.jsonl"), "a") as log:
        for r in range(args.rounds):
            if r > 0 and args.budget_s > 0 and time.monotonic() - began > args.budget_s:
                print(f"paired_rounds: {args.workload}: budget of {args.budget_s:g} s spent after "
                      f"{r} rounds", file=sys.stderr, flush=True)
                break
            order = names if r % 2 == 0 else names[::-1]
            for n in order:
                rec = run_one(n, args, workload_args, sampler)
                rec.update(round=r, workload=args.workload, args=workload_args, time=time.time())
                log.write(json.dumps(rec) + "\n")
                log.flush()
                rows[n].append(rec)
                print(json.dumps({k: rec.get(k) for k in
                                  ("round", "config", "steps_per_s", "step_ms_mean",
                                   "step_ms_p99", "step_ms_slowest", "host_step_ms_slowest",
                                   "nvml_peak_delta_mib", "losses_md5", "rc")}),
                  flush=True)
    peer = names[0]

    def spread(values, digits=4):
        if not values:
            return {"median": None, "min": None, "max": None}
        return {"median": round(statistics.median(values), digits),
                "min": round(min(values), digits), "max": round(max(values), digits)}

    summaries = []
    for n in names:
        sps = [x.get("steps_per_s") for x in rows[n]]
        ok = [v for v in sps if v]
        ratios = [a["steps_per_s"] / b["steps_per_s"] for a, b in zip(rows[n], rows[peer])
                  if a.get("steps_per_s") and b.get("steps_per_s")]
        peaks = [x["nvml_peak_delta_mib"] for x in rows[n] if x.get("nvml_peak_delta_mib")]
        means = [x["step_ms_mean"] for x in rows[n] if x.get("step_ms_mean")]
        p99s = [x["step_ms_p99"] for x in rows[n] if x.get("step_ms_p99")]
        same = all(x.get("losses_md5") == rows[peer][0].get("losses_md5") for x in rows[n])
        pairs = [(a, b) for a, b in zip(rows[n], rows[peer])
                 if a.get("step_ms_mean") and b.get("step_ms_mean")]
        mean_ratio = [a["step_ms_mean"] / b["step_ms_mean"] for a, b in pairs]
        p99_ratio = [a["step_ms_p99"] / b["step_ms_p99"] for a, b in pairs
                     if a.get("step_ms_p99") and b.get("step_ms_p99")]
        # Which steps were the two slowest in each round (step periods; steps count from the
        # end of the warm-up): the same early steps every round point at first-time costs.
        slow_steps = sorted(k for x in rows[n] for k, _ in (x.get("step_ms_slowest") or [])[:2])
        obs = [x["gmem_observe"] for x in rows[n] if x.get("gmem_observe")]
        own = {}
        for key in ("alloc_ns", "free_ns", "share_pct", "allocs", "frees"):
            vals = [o[key] for o in obs if key in o]
            if vals:
                own[key] = spread(vals, 3)
        # A tail from the trace's growth: the hooks' longest wait, the longest page population.
        grown = [x["gmem_growth"] for x in rows[n] if x.get("gmem_growth")]
        growth = {key: spread([g[key] for g in grown if key in g], 3)
                  for key in ("stalls", "stall_max_ms", "populate_max_ms")} if grown else None
        summary = {
            "summary": args.workload, "config": n, "vs": peer, "runs": len(sps),
            "failed": len(sps) - len(ok),
            "mean_steps_per_s": round(statistics.mean(ok), 3) if ok else None,
            "ratio_median": round(statistics.median(ratios), 4) if ratios else None,
            "ratio_min": round(min(ratios), 4) if ratios else None,
            "ratio_max": round(max(ratios), 4) if ratios else None,
            "step_ms_mean": round(statistics.mean(means), 3) if means else None,
            "step_ms_p99_median": round(statistics.median(p99s), 3) if p99s else None,
            "step_ms_p99_max": round(max(p99s), 3) if p99s else None,
            "nvml_peak_mib_max": round(max(peaks), 1) if peaks else None,
            "nvml_peak_mib_min": round(min(peaks), 1) if peaks else None,
            "losses_identical": same,
            "step_mean_ratio": spread(mean_ratio), "step_p99_ratio": spread(p99_ratio),
            "slowest_steps": slow_steps,
            "gmem_own": own or None, "gmem_growth": growth}
        summaries.append(summary)
        print(json.dumps(summary), flush=True)
    with open(os.path.join(args.out, "summary.json"), "a") as f:
        for summary in summaries:
            f.write(json.dumps(summary) + "\n")


if __name__ == "__main__":
    main()
