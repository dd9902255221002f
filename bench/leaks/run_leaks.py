#!/usr/bin/env python3
"""The leak benchmark: programs with known verdicts, run under `gmem run`, judged by `gmem leaks`.

Each program marks the lines that allocate leaking memory with a LEAK comment (`# LEAK` or
`// LEAK`); every other line is clean. A program that prints "ready PID" is judged while it runs
(`gmem leaks PID`, polled until --attach-timeout for a service), then stdin is closed; the others
at exit. A reported leak is named at a line when a frame of the program's own file at that line
is in the site's stack. Per program the runner prints the
expected and reported lines; overall precision and recall. It fails unless every expected line
is named and no other line is reported as a leak.

    run_leaks.py --gmem build/bin/gmem [--attach-timeout 60] PROGRAM_SPEC...
PROGRAM_SPEC: `path/prog.py[:ARGS]`, `native:BINARY:NAME` (bench/leaks/native_programs.cpp,
whose source holds the markers), each optionally prefixed with `pool=` for
`gmem run --frameworks pool`.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NATIVE_SRC = os.path.join(HERE, "native_programs.cpp")


def marked_lines(source, program=None):
    """Lines carrying a LEAK marker (`# LEAK`, `// LEAK`); in the native programs' shared
    source, `// LEAK(PROGRAM)` markers of `program`."""
    want = r"// LEAK\(%s\)" % re.escape(program) if program else r"(#|//) LEAK\b"
    return {n for n, text in enumerate(open(source, encoding="utf-8"), 1) if re.search(want, text)}


def site_lines(site, source):
    """The lines of `source` a site's stack names, innermost first."""
    base = os.path.basename(source)
    return [f["line"] for f in site.get("frames", [])
            if f.get("line") and os.path.basename(f.get("file", "")) == base]


def judge(report, source, expected):
    """(reported lines, leak sites with no line of the program). A site names the first marked
    line in its stack (a helper's allocation line may be innermost), else its innermost line of
    the program."""
    named, stray = set(), 0
    for s in report.get("sites", []):
        lines = site_lines(s, source)
        hits = [ln for ln in lines if ln in expected]
        if hits or lines:
            named.add((hits or lines)[0])
        else:
            stray += 1
    return named, stray


def leaks_json(gmem, target):
    r = subprocess.run([gmem, "leaks", str(target), "--json"], capture_output=True, text=True,
                       timeout=120, check=False)
    try:
        return json.loads(r.stdout)
    except ValueError:
        raise RuntimeError(f"gmem leaks {target}: exit {r.returncode}: {r.stderr.strip()}")


def run_one(gmem, spec, attach_timeout):
    frameworks = []
    if spec.startswith("pool="):
        frameworks, spec = ["--frameworks", "pool"], spec[len("pool="):]
    if spec.startswith("native:"):
        _, binary, name = spec.split(":", 2)
        cmd, source, expected = [binary, name], NATIVE_SRC, marked_lines(NATIVE_SRC, name)
        label = "native " + name
    else:
        path, _, args = spec.partition(":")
        cmd, source = [sys.executable, path] + (args.split() if args else []), path
        expected, label = marked_lines(path), os.path.basename(path)
    if frameworks:
        label += " (pool)"
    proc = subprocess.Popen([gmem, "run"] + frameworks + ["--"] + cmd, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = proc.stdout.readline()
    report, attach_s = None, None
    m = re.match(r"ready (\d+)", first)
    if m:  # judged while it runs: poll until every expected line is flagged or time is up
        pid, t0 = int(m.group(1)), time.monotonic()
        while True:
            report = leaks_json(gmem, pid)
            named, _ = judge(report, source, expected)
            if expected <= named or time.monotonic() - t0 > attach_timeout:
                break
            time.sleep(2)
        attach_s = time.monotonic() - t0
        out, err = proc.communicate(input="", timeout=600)  # closes stdin: the program ends
        out = first + out
    else:
        out, err = proc.communicate(input="", timeout=3600)
        out = first + out
        pid = re.search(r"\(pid (\d+)\) exited", err)
        if pid is None:
            raise RuntimeError(f"{label}: no exit summary:\n{err[-2000:]}")
        pid = int(pid.group(1))
        report = leaks_json(gmem, pid)
    subprocess.run([gmem, "clean", str(pid)], capture_output=True, check=False)
    named, stray = judge(report, source, expected)
    return {"program": label, "expected": sorted(expected), "reported": sorted(named),
            "stray": stray, "attach_s": attach_s, "status": proc.returncode,
            "summary": [ln for ln in err.splitlines() if ln.startswith("gmem:")]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gmem", default="build/bin/gmem")
    ap.add_argument("--attach-timeout", type=float, default=60.0,
                    help="seconds a running program may take to show its leaks (default 60)")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("specs", nargs="+")
    a = ap.parse_args()
    results, tp, fp, fn = [], 0, 0, 0
    print(f"{'program':34} {'expected leak lines':22} {'reported':22} verdict")
    for spec in a.specs:
        try:
            r = run_one(a.gmem, spec, a.attach_timeout)
        except (RuntimeError, subprocess.SubprocessError, OSError) as e:
            print(f"{spec:34} ERROR {e}")
            fn += 1
            continue
        exp, rep = set(r["expected"]), set(r["reported"])
        r_tp, r_fp, r_fn = len(exp & rep), len(rep - exp) + r["stray"], len(exp - rep)
        tp, fp, fn = tp + r_tp, fp + r_fp, fn + r_fn
        ok = r_fp == 0 and r_fn == 0
        when = ""
        if r["attach_s"] is not None:  # judged while it ran
            when = (f" (flagged {r['attach_s']:.0f} s after attaching)" if exp
                    else " (judged while it ran)")
        print(f"{r['program']:34} {','.join(map(str, r['expected'])) or '-':22} "
              f"{','.join(map(str, r['reported'])) or '-':22} "
              f"{'ok' if ok else 'WRONG'}{when}"
              + (f"; {r['stray']} leak sites outside the program" if r["stray"] else ""))
        if not ok:
            for ln in r["summary"]:
                print("    " + ln)
        results.append(r)
    precision = tp / (tp + fp) if tp + fp else 1.0
    recall = tp / (tp + fn) if tp + fn else 1.0
    print(f"\n{len(results)} programs: {tp} leaks named at their line, {fn} missed, {fp} false; "
          f"precision {precision:.2f}, recall {recall:.2f}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump({"results": results, "precision": precision, "recall": recall}, f, indent=2)
    return 0 if fp == 0 and fn == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
