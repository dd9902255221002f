#!/usr/bin/env python3
"""Runs a command once and prints one JSON line: its steps/s (from the workload's JSON line) and
the child's resource usage (user and system CPU seconds, minor/major page faults, voluntary and
involuntary context switches), so a slowdown can be split into CPU time, kernel time and waits.
  rusage_run.py LABEL -- command ...   (environment passed through)"""
import json
import re
import resource
import subprocess
import sys

label = sys.argv[1]
cmd = sys.argv[sys.argv.index("--") + 1:]
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
print(json.dumps(row), flush=True)
if p.returncode != 0 or m is None:
    sys.stderr.write(p.stdout[-3000:])
gm = [l for l in p.stdout.splitlines() if l.startswith("gmem:")]
if gm:
    sys.stderr.write("\n".join(gm[-12:]) + "\n")
