#!/usr/bin/env python3
"""Turns raw benchmark results (bench/run_gpu.sh's output folder) into
bench/results/<date>-<gpu>.md, -alloc.csv, -workloads.csv, -replay.csv and .json.

  report.py --raw DIR [--replay build/bench/gmem_replay] [--results bench/results]
            [--command "how the raw results were made"]

Replays the recorded traces on this machine first (gmem_replay, part 3) when the binary is
given and the raw folder holds trace-*.txt files.
"""
import argparse
import csv
import gzip
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))

SIZES = [512, 65536, 1 << 20, 16 << 20, 256 << 20]
ALLOC_ORDER = ["cudaMalloc", "cuMemAlloc", "gmem-runtime", "gmem-driver", "gmem-async",
               "gmem-runtime-nosafety", "gmem-runtime+trace",
               "gmem-runtime+trace+stacks", "cudaMallocAsync",
               "cub", "torch-caching", "torch-caching-python"]
ALLOC_DESC = {
    "cudaMalloc": "cudaMalloc + cudaFree (static runtime)",
    "cuMemAlloc": "cuMemAlloc_v2 + cuMemFree_v2 (driver)",
    "gmem-runtime": "**gmem** via the runtime (cudaMalloc, LD_PRELOAD)",
    "gmem-driver": "**gmem** via the driver (cuMemAlloc_v2, LD_PRELOAD)",
    "gmem-async": "gmem via cudaMallocAsync + cudaFreeAsync (stream-ordered, LD_PRELOAD)",
    "gmem-runtime-nosafety": "gmem via the runtime, GMEM_REUSE_SAFETY=0 (unsafe; fence cost)",
    "gmem-runtime+trace": "gmem via the runtime, trace on, stacks off",
    "gmem-runtime+trace+stacks": "gmem via the runtime, trace on, stacks on (gmem's default)",
    "cudaMallocAsync": "cudaMallocAsync + cudaFreeAsync (pool kept)",
    "cub": "CUB CachingDeviceAllocator (pow2 bins 512 B-256 MiB)",
    "torch-caching": "PyTorch caching allocator (C++ raw_alloc/raw_delete)",
    "torch-caching-python": "PyTorch caching allocator (Python caching_allocator_alloc)",
}
MODE_ORDER = ["a", "a-expandable", "d", "b", "c", "c-trace", "c-trace-stacks", "pool", "nopool",
              "nopool+gmem", "bfc", "bfc-grow", "platform", "platform+gmem"]


def load_jsonl(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip().startswith("{")]


def size_name(b):
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n and b % n == 0:
            return f"{b // n} {unit}"
    return f"{b} B"


def gib(b):
    return "—" if b is None else f"{b / 2**30:.2f} GiB"


def us(ns):
    return f"{ns / 1000:.2f}" if ns < 100_000 else f"{ns / 1000:.0f}"


def header(env, what, command, reps):
    return (f"GPU {env.get('gpu')} ({env.get('gpu_memory')}), driver {env.get('driver')} "
            f"(CUDA {env.get('cuda_driver')}), {env.get('nvcc')}, torch {env.get('torch')}, "
            f"commit `{env.get('commit')}`, {env.get('date')}. {what}. Command: `{command}`. "
            f"Repetitions: {reps}.\n")


def alloc_section(env, recs, out, commands=None):
    labels = [l for l in ALLOC_ORDER if any(r["label"] == l for r in recs)]
    labels += sorted({r["label"] for r in recs} - set(labels))
    out.append("## 1. Allocation cost\n")
    out.append(header(env, "Host time per alloc+free pair (sizes) and per call of the random "
                      "workload (1,000 live blocks in all, log-uniform 256 B-64 MiB, random "
                      "order); median / p99 in µs over all threads' samples; 20 untimed "
                      "warm-up pairs per thread first",
                      "bench/run_gpu.sh (PARTS=alloc,torchalloc); each row's command is listed "
                      "below the tables",
                      f"1 run per cell, {env.get('seconds_per_cell')} s of samples per cell "
                      "(up to 20,000 per thread)"))
    threads = sorted({r["threads"] for r in recs})
    for t in threads:
        out.append(f"\n**{t} thread{'s' if t > 1 else ''}** (median / p99, µs)\n")
        out.append("| allocator | " + " | ".join(size_name(s) for s in SIZES) +
                   " | random, per call |")
        out.append("|---" * (len(SIZES) + 2) + "|")
        for l in labels:
            cells = []
            for s in SIZES + [None]:
                m = [r for r in recs if r["label"] == l and r["threads"] == t and
                     (r["test"] == "random" if s is None else
                      (r["test"] == "pair" and r["size"] == s))]
                if not m:
                    cells.append("")
                elif m[0]["failed"]:
                    cells.append("failed")
                else:
                    cells.append(f"{us(m[0]['median_ns'])} / {us(m[0]['p99_ns'])}")
            if any(cells):
                dates = {r.get("run_date") for r in recs if r["label"] == l}
                older = [d for d in dates if d and d != env.get("date", "")[:len(d)]]
                note = f" (run of {older[0]})" if older else ""
                out.append(f"| {ALLOC_DESC.get(l, l)}{note} | " + " | ".join(cells) + " |")
    if commands:
        out.append("\nCommands (from the repository root; `--json FILE` omitted):\n")
        for label in labels:
            if label in commands:
                out.append(f"- {label}: `{commands[label].strip()}`")
    out.append("")


COUNTERS = ["total_allocs", "cache_hits", "fences", "segment_maps", "segment_unmaps",
            "peak_live_bytes", "peak_reserved_bytes", "pending_bytes", "stream_free_bytes"]


def counters_row(name, g):
    cells = []
    for c in COUNTERS:
        v = g.get(c)
        cells.append("—" if v is None else (gib(v) if c.endswith("bytes") else str(v)))
    return f"| {name} | " + " | ".join(cells) + " |"


def counters_section(pool_stats, out, title="gmem pool counters at the end of each part-1 run"):
    if not pool_stats:
        return
    out.append(f"\n{title} (gmem_stats(), device 0):\n")
    out.append("| run | " + " | ".join(COUNTERS) + " |")
    out.append("|---" * (len(COUNTERS) + 1) + "|")
    for name, g in pool_stats.items():
        out.append(counters_row(name, g))
    out.append("")


def aggregate(runs):
    """Workload runs of one (workload, mode) -> one row (median steps/s over reps)."""
    ok = [r for r in runs if r.get("returncode") == 0 and "steps_per_s" in r]
    row = {"runs": len(runs), "ok": len(ok), "description": runs[0].get("description", ""),
           "run_date": runs[0].get("run_date", ""),
           "command": runs[0].get("command", "")}
    if not ok:
        row["error"] = (runs[0].get("stderr_tail") or "").strip().splitlines()[-1:]
        return row
    row["steps_per_s"] = statistics.median(r["steps_per_s"] for r in ok)
    row["steps_per_s_all"] = [round(r["steps_per_s"], 3) for r in ok]
    row["nvml_peak"] = max(r.get("nvml_peak_delta", 0) for r in ok)
    row["losses"] = ok[0].get("losses")
    others = [r.get("losses") for r in ok[1:] if r.get("losses")]
    if others:  # run-to-run reproducibility of the same mode
        row["rep_check"] = loss_check({"losses": others[0]}, {"losses": row["losses"]})
    g = [r["gmem"] for r in ok if r.get("gmem")]
    if g:
        row["gmem_peak_reserved"] = max(x["peak_reserved_bytes"] for x in g)
        row["gmem_peak_live"] = max(x["peak_live_bytes"] for x in g)
        row["gmem"] = g[0]
    vals = [r.get("torch_max_reserved") for r in ok if r.get("torch_max_reserved")]
    vals += [r.get("framework_peak_reserved") for r in ok if r.get("framework_peak_reserved")]
    if vals:
        row["framework_peak_reserved"] = max(vals)
    return row


def loss_check(row, ref):
    if not row.get("losses") or not ref or not ref.get("losses"):
        return "—"
    a, b = row["losses"], ref["losses"]
    if len(a) != len(b):
        return "different length"
    if a == b:
        return "identical"
    d = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
    return f"max rel. diff {d:.1e}"


def workload_section(env, recs, out, merged=False):
    groups = {}
    for r in recs:
        if r.get("mode") == "a-record":
            continue
        groups.setdefault(r["workload"], {}).setdefault(r["mode"], []).append(r)
    reps = max((r.get("rep", 0) + 1 for r in recs), default=1)
    out.append("## 2. Real workloads\n")
    out.append(header(env, "Timed steps after warm-up, one process per run; steps/s is the "
                      "median over repetitions. *peak reserved*: the allocator's own counter "
                      "(PyTorch max_memory_reserved, gmem peak_reserved_bytes via gmem_stats(), "
                      "CuPy pool total_bytes, XLA peak pool bytes). *NVML peak*: peak device "
                      "memory used during the run (1 ms sampling) minus the idle level before "
                      "it, so it includes the CUDA context, cuBLAS/cuDNN workspaces and "
                      "modules: the one figure that sees every allocator. Losses are compared "
                      "bit for bit with the first mode of each table",
                      "bench/run_workloads.py (see each row's command)", reps))
    rows_all = {}
    for wl in sorted(groups):
        modes = groups[wl]
        order = [m for m in MODE_ORDER if m in modes] + sorted(set(modes) - set(MODE_ORDER))
        rows = {m: aggregate(modes[m]) for m in order}
        rows_all[wl] = rows
        ref = rows[order[0]]
        out.append(f"\n### {wl}\n")
        out.append("| mode | what | steps/s | × first | peak reserved | NVML peak | losses |" +
                   (" run |" if merged else ""))
        out.append("|---|---|---|---|---|---|---|" + ("---|" if merged else ""))
        for m in order:
            r = rows[m]
            if "steps_per_s" not in r:
                out.append(f"| {m} | {r['description']} | failed: {' '.join(r['error'])[:120]} "
                           "| | | | |")
                continue
            res = r.get("gmem_peak_reserved", r.get("framework_peak_reserved"))
            rel = r["steps_per_s"] / ref["steps_per_s"] if ref.get("steps_per_s") else 0
            sps = f"{r['steps_per_s']:.2f}"
            if len(r["steps_per_s_all"]) > 1:
                sps += " (" + ", ".join(f"{x:.2f}" for x in r["steps_per_s_all"]) + ")"
            out.append(f"| {m} | {r['description']} | {sps} | {rel:.2f} | "
                       f"{gib(res)} | {gib(r['nvml_peak'])} | {loss_check(r, ref)}"
                       + (f" (rep 2 vs rep 1: {r['rep_check']})" if r.get("rep_check") else "")
                       + " |" +
                       (f" {r.get('run_date', '')} |" if merged else ""))
        g = {m: rows[m]["gmem"] for m in order if rows[m].get("gmem")}
        if g:
            counters_section(g, out, "gmem pool counters at the end of the run")
        cmds = sorted({r["command"] for r in rows.values()})
        out.append("\nCommands (from the repository root): " +
                   "; ".join(f"`{c.strip()}`" for c in cmds))
    out.append("")
    return rows_all


def tracing_section(rows_all, out):
    lines = []
    for wl, rows in sorted(rows_all.items()):
        if "c" not in rows or "steps_per_s" not in rows["c"]:
            continue
        base = rows["c"]["steps_per_s"]
        cells = []
        for m in ("c", "c-trace", "c-trace-stacks"):
            r = rows.get(m, {})
            cells.append(f"{r['steps_per_s']:.2f} ({r['steps_per_s'] / base:.3f})"
                         if "steps_per_s" in r else "—")
        lines.append(f"| {wl} | " + " | ".join(cells) + " |")
    if not lines:
        return
    out.append("## 4. Tracing overhead\n")
    out.append("Steps/s under gmem (mode c) with the trace off (GMEM_TRACE=0), on without stacks "
               "(GMEM_TRACE=1 GMEM_STACK_DEPTH=0) and on with stacks (GMEM_TRACE=1, default "
               "depth); in parentheses relative to trace off. Same runs as part 2.\n")
    out.append("| workload | trace off | trace on, stacks off | trace on, stacks on |")
    out.append("|---|---|---|---|")
    out += lines
    out.append("")


def summary_section(rows_all, replay, out):
    """The issue's targets, one line per torch workload: where gmem meets them and where not."""
    lines = []
    for wl, rows in sorted(rows_all.items()):
        if not wl.startswith("torch-") or "steps_per_s" not in rows.get("c", {}):
            continue
        a, c = rows.get("a", {}), rows["c"]
        best = min(((rows[m].get("framework_peak_reserved"), m) for m in ("a", "a-expandable", "d")
                    if rows.get(m, {}).get("framework_peak_reserved")), default=(None, None))
        thr = c["steps_per_s"] / a["steps_per_s"] if a.get("steps_per_s") else None
        res = c.get("gmem_peak_reserved")
        trace = f"trace-{wl}.txt"
        rp = [r for r in replay if r["trace"] == trace and r["policy"] == "gmem"]
        cells = [wl,
                 f"{thr:.2f} {'✓' if thr >= 0.97 else '✗'}" if thr else "—",
                 (f"{gib(res)} vs {gib(best[0])} ({best[1]}) {'✓' if res <= best[0] else '✗'}"
                  if res and best[0] else "—"),
                 (f"{rp[0]['ratio']:.3f} {'✓' if rp[0]['ratio'] <= 1.10 else '✗'}" if rp else "—"),
                 loss_check(c, a)]
        lines.append("| " + " | ".join(cells) + " |")
    if not lines:
        return
    out.append("## Summary against the targets\n")
    out.append("| workload | (c) ÷ (a) steps/s, target ≥ 0.97 | (c) peak reserved vs best PyTorch "
               "mode, target ≤ | replay ratio of gmem's pool, target ≤ 1.10 | (c) losses vs (a) |")
    out.append("|---|---|---|---|---|")
    out += lines
    out.append("")


def pool_commit():
    """The commit whose pool the CPU replay linked (gmem_replay is built from the work tree)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "pool"], capture_output=True,
                               text=True).stdout.strip()
        return head + (" + uncommitted pool/ changes" if dirty else "") if head else "unknown"
    except OSError:
        return "unknown"


def replay_section(env, recs, out):
    if not recs:
        return
    out.append("## 3. Fragmentation (trace replay)\n")
    out.append("Allocation traces recorded from part 2 (PyTorch memory history of mode a: every "
               "tensor allocation and free, in order) and replayed: on the CPU by "
               "`build/bench/gmem_replay` (gmem's pool from libgmem_pool.a with a fake upstream "
               "and instant fences; a PyTorch-like policy; CUB-like power-of-two bins; exact = "
               "no caching), and on the GPU by `build/bench/replay_gpu` (cudaMallocAsync's real "
               "pool, CUB's real allocator). *ratio* = peak reserved ÷ peak live; target ≤ 1.10. "
               f"Traces and GPU replays from {env.get('gpu')}, {env.get('date')}. CPU replays "
               f"run at report time with the pool of commit `{pool_commit()}`, which may be "
               "newer than the libgmem.so of part 2.\n")
    out.append("| trace | policy | where | peak live | peak reserved | ratio | host ns/event | "
               "segment maps / unmaps / fences |")
    out.append("|---|---|---|---|---|---|---|---|")
    for r in sorted(recs, key=lambda r: (r["trace"], r["where"], r["ratio"])):
        ns = f"{r['ns_per_event']:.0f}" if "ns_per_event" in r else "—"
        fail = " (failures!)" if r.get("failures") or r.get("ok") is False else ""
        d = dict(kv.split("=", 1) for kv in r.get("details", "").split() if "=" in kv)
        churn = (f"{d['segment_maps']} / {d['segment_unmaps']} / {d['fences']}"
                 if "segment_maps" in d else "")
        out.append(f"| {r['trace']} | {r['policy']}{fail} | {r['where']} | {gib(r['peak_live'])} "
                   f"| {gib(r['peak_reserved'])} | {r['ratio']:.3f} | {ns} | {churn} |")
    out.append("")


def write_csv(path, recs, fields):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in recs:
            w.writerow(r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--raw", required=True, help="raw folder(s), comma-separated; later win")
    ap.add_argument("--replay", default="")
    ap.add_argument("--gmem-tool", default="", help="build/bin/gmem, to export gmem's traces")
    ap.add_argument("--results", default="bench/results")
    ap.add_argument("--command", default="make bench-gpu")
    args = ap.parse_args()
    raws = [d for d in args.raw.split(",") if d]
    envs = [json.load(open(os.path.join(d, "env.json"))) for d in raws]
    env = dict(envs[-1])
    if len(envs) > 1:  # several runs merged: say which commit and date each part came from
        env["commit"] = " / ".join(e.get("commit", "?") for e in envs)
        env["date"] = envs[-1]["date"] + " (merged with " + ", ".join(
            e["date"] for e in envs[:-1]) + ")"
    traces = {}
    tmp = tempfile.mkdtemp(prefix="gmem-bench-traces-")
    for d in raws:  # a later run's trace of the same name replaces an earlier one
        for f in sorted(os.listdir(d)):
            if re.match(r"trace-.*\.txt$", f):
                traces[f] = os.path.join(d, f)
            elif re.match(r"gmemtrace-.*\.bin\.gz$", f) and args.gmem_tool:
                # gmem's own trace of a run: gmem export --format pytorch, then the converter
                name = "trace-gmem-" + f[len("gmemtrace-"):-len(".bin.gz")] + ".txt"
                raw = os.path.join(tmp, f[:-3])
                with gzip.open(os.path.join(d, f), "rb") as src, open(raw, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                pkl = raw + ".pickle"
                ok = subprocess.run([args.gmem_tool, "export", "--format", "pytorch", raw, "-o",
                                     pkl], capture_output=True, text=True)
                if ok.returncode == 0:
                    subprocess.run([sys.executable, os.path.join(HERE, "trace_from_snapshot.py"),
                                    pkl, os.path.join(tmp, name)], check=False)
                    traces[name] = os.path.join(tmp, name)
                else:
                    print(f"report: gmem export failed for {f}: {ok.stderr.strip()}")
                os.remove(raw)
            elif re.match(r"trace-.*\.txt\.gz$", f):  # committed raw folders keep them gzipped
                plain = os.path.join(tmp, f[:-3])
                with gzip.open(os.path.join(d, f), "rb") as src, open(plain, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                traces[f[:-3]] = plain
    traces = [traces[k] for k in sorted(traces)]
    cpu_jsonl = os.path.join(raws[-1], "replay-cpu.jsonl")
    if args.replay and os.path.exists(args.replay) and traces:
        if os.path.exists(cpu_jsonl):
            os.remove(cpu_jsonl)
        subprocess.run([args.replay, "--json", cpu_jsonl] + traces, check=False)
    alloc, work, gpu_replay, pool_stats, commands = {}, {}, {}, {}, {}
    for i, d in enumerate(raws):  # later runs replace earlier ones cell by cell
        for r in load_jsonl(os.path.join(d, "alloc.jsonl")):
            r["run_date"] = envs[i].get("date")
            if r.get("kind") == "gmem_stats":
                pool_stats[r["label"]] = r
            else:
                alloc[(r["label"], r["test"], r["size"], r["threads"])] = r
        seen = {}
        for r in load_jsonl(os.path.join(d, "workloads.jsonl")):
            r["run_date"] = envs[i].get("date")
            seen.setdefault((r["workload"], r["mode"]), []).append(r)
        work.update(seen)
        cpath = os.path.join(d, "commands.txt")
        if os.path.exists(cpath):
            for line in open(cpath):
                if ": " in line:
                    label, cmd = line.split(": ", 1)
                    commands[label] = cmd
        for r in load_jsonl(os.path.join(d, "replay.jsonl")):
            gpu_replay[(r["trace"], r["policy"])] = r
    alloc = list(alloc.values())
    work = [r for runs in work.values() for r in runs]
    replay = load_jsonl(cpu_jsonl) + list(gpu_replay.values())

    gpu = re.sub(r"[^a-z0-9]+", "-", env.get("gpu", "gpu").lower()).strip("-")
    stem = f"{env['date'][:10]}-{gpu}"
    os.makedirs(args.results, exist_ok=True)
    out = [f"# gmem benchmarks: {env.get('gpu')}, {env.get('date')}\n",
           f"| GPU | driver | CUDA | nvcc | torch | CuPy | JAX | CPU | commit | date |",
           "|---|---|---|---|---|---|---|---|---|---|",
           f"| {env.get('gpu')} ({env.get('gpu_memory')}) | {env.get('driver')} | "
           f"{env.get('cuda_driver')} | {env.get('nvcc')} | {env.get('torch')} | "
           f"{env.get('cupy')} | {env.get('jax')} | {env.get('cpu')} | `{env.get('commit')}` | "
           f"{env.get('date')} |\n",
           f"Made by `{args.command}` (bench/run_gpu.sh, then bench/report.py); gmem library: "
           f"`{env.get('gmem_lib') or 'none (gmem rows missing)'}`; parts: {env.get('parts')}. "
           "bench/README.md says how to read each table.\n"]
    summary_at = len(out)
    if alloc:
        alloc_section(env, alloc, out, commands)
        counters_section(pool_stats, out)
    rows_all = workload_section(env, work, out, len(raws) > 1) if work else {}
    summary = []
    summary_section(rows_all, replay, summary)
    out[summary_at:summary_at] = summary
    replay_section(env, replay, out)
    tracing_section(rows_all, out)
    md = os.path.join(args.results, stem + ".md")
    with open(md, "w") as f:
        f.write("\n".join(out) + "\n")
    write_csv(os.path.join(args.results, stem + "-alloc.csv"), alloc,
              ["label", "allocator", "test", "size", "threads", "samples", "median_ns", "p99_ns",
               "mean_ns", "failed"])
    flat = []
    for r in work:
        g = r.get("gmem") or {}
        flat.append({**r, "gmem_peak_reserved": g.get("peak_reserved_bytes"),
                     "gmem_peak_live": g.get("peak_live_bytes"),
                     "loss_first": (r.get("losses") or [None])[0],
                     "loss_last": (r.get("losses") or [None])[-1]})
    write_csv(os.path.join(args.results, stem + "-workloads.csv"), flat,
              ["workload", "mode", "rep", "returncode", "steps", "seconds", "steps_per_s",
               "torch_max_reserved", "framework_peak_reserved", "gmem_peak_reserved",
               "gmem_peak_live", "nvml_peak_delta", "wall_s", "loss_first", "loss_last",
               "command"])
    write_csv(os.path.join(args.results, stem + "-replay.csv"), replay,
              ["trace", "policy", "where", "events", "peak_live", "peak_reserved", "ratio",
               "ns_per_event"])
    with open(os.path.join(args.results, stem + ".json"), "w") as f:
        json.dump({"env": env, "alloc": alloc, "workloads": work, "replay": replay}, f)
    shutil.rmtree(tmp, ignore_errors=True)
    print(f"report: {md}")


if __name__ == "__main__":
    main()
