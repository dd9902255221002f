#!/usr/bin/env python3
"""Runs a command once and prints one JSON line: its steps/s (from the workload's JSON line), the
child's resource usage (user and system CPU seconds, minor/major page faults, voluntary and
involuntary context switches), so a slowdown can be split into CPU time, kernel time and waits,
and, with --nvml, the peak of device 0's used memory during the run above the level before it
(sampled every ~1 ms through pynvml, as bench/run_workloads.py does).
  rusage_run.py LABEL [--nvml] -- command ...   (environment passed through)"""
import hashlib
import json
import re
import resource
import subprocess
import sys
import threading

label = sys.argv[1]
cmd = sys.argv[sys.argv.index("--") + 1:]
sampler = None
if "--nvml" in sys.argv[:sys.argv.index("--")]:
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    used = lambda: pynvml.nvmlDeviceGetMemoryInfo(handle).used  # noqa: E731
    idle = used()
    peak = [idle]
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], used())
            done.wait(0.001)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
before = resource.getrusage(resource.RUSAGE_CHILDREN)
p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
after = resource.getrusage(resource.RUSAGE_CHILDREN)
m = re.search(r'"steps_per_s": ([0-9.]+)', p.stdout)
row = {
    "label": label, "rc": p.returncode,
    "steps_per_s": float(m.group(1)) if m else None,
    "utime_s": round(after.ru_utime - before.ru_utime, 3),
    "stime_s": round(after.ru_stime - before.ru_stime, 3),
    "minflt": after.ru_minflt - before.ru_minflt,
    "majflt": after.ru_majflt - before.ru_majflt,
    "nvcsw": after.ru_nvcsw - before.ru_nvcsw,
    "nivcsw": after.ru_nivcsw - before.ru_nivcsw,
}
if sampler is not None:
    done.set()
    sampler.join()
    row["nvml_peak_mib"] = round((peak[0] - idle) / 2**20, 1)
loss = re.search(r'^losses: (.*)$', p.stdout, re.M)  # torch_train.py's last line
if loss:
    values = loss.group(1).split()
    row["losses"] = len(values)
    row["last_loss"] = values[-1] if values else None
    row["losses_md5"] = hashlib.md5(loss.group(1).encode()).hexdigest()[:12]
print(json.dumps(row), flush=True)
if p.returncode != 0 or m is None:
    sys.stderr.write(p.stdout[-3000:])
gm = [l for l in p.stdout.splitlines() if l.startswith("gmem:")]
if gm:
    sys.stderr.write("\n".join(gm[-12:]) + "\n")
