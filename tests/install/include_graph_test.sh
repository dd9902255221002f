#!/usr/bin/env bash
# The include graph docs/design.md ("Layout") describes: no relative include (`#include "../`);
# nothing outside interpose/hooks/ includes it; pool/, client/ and profiler/ include nothing of
# interpose/ or tools/, and pool/ and client/ nothing of profiler/; no module (a .h with its
# .cpp) of one folder and a module of another include each other, directly or through others.
# Exit 0 pass, 1 fail (each offending include or circle named).
set -u
cd "$(dirname "$0")/../.." || exit 1
python3 - <<'PY'
import os, re, sys

roots = ["bench", "client", "common", "include", "interpose", "pool", "profiler", "tools"]
includes = {}  # file -> [(line, included file)]
for root in roots:
    for d, _, names in os.walk(root):
        for n in names:
            if n.endswith((".h", ".cpp", ".cu", ".cuh")):
                p = os.path.join(d, n)
                with open(p, encoding="utf-8", errors="replace") as f:
                    includes[p] = [(i, m.group(1)) for i, line in enumerate(f, 1)
                                   if (m := re.match(r'\s*#\s*include\s+"([^"]+)"', line))]
bad = []
for p, incs in includes.items():
    for line, inc in incs:
        where = f"{p}:{line}: #include \"{inc}\""
        if inc.startswith("../") or "/../" in inc:
            bad.append(f"{where}: a relative include")
        if inc.startswith("interpose/hooks/") and not p.startswith("interpose/hooks/"):
            bad.append(f"{where}: only interpose/hooks/ includes interpose/hooks/")
        if p.startswith(("pool/", "client/", "profiler/")) and inc.startswith(("interpose/", "tools/")):
            bad.append(f"{where}: {p.split('/')[0]}/ is below interpose/ and tools/")
        if p.startswith(("pool/", "client/")) and inc.startswith("profiler/"):
            bad.append(f"{where}: {p.split('/')[0]}/ is below profiler/")

# Modules: a file without its suffix; an edge per include of another module that exists.
edges = {}
for p, incs in includes.items():
    a = os.path.splitext(p)[0]
    for _, inc in incs:
        if os.path.exists(inc) and os.path.splitext(inc)[0] != a:
            edges.setdefault(a, set()).add(os.path.splitext(inc)[0])
# Strongly connected components (Tarjan, iterative); one that spans folders is a circle.
index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
for start in list(edges):
    if start in index:
        continue
    work = [(start, iter(edges.get(start, ())))]
    index[start] = low[start] = counter[0]; counter[0] += 1; stack.append(start); on.add(start)
    while work:
        v, it = work[-1]
        w = next(it, None)
        if w is not None:
            if w not in index:
                index[w] = low[w] = counter[0]; counter[0] += 1; stack.append(w); on.add(w)
                work.append((w, iter(edges.get(w, ()))))
            elif w in on:
                low[v] = min(low[v], index[w])
            continue
        work.pop()
        if work:
            low[work[-1][0]] = min(low[work[-1][0]], low[v])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len({os.path.dirname(c) for c in comp}) > 1:
                out.append(sorted(comp))
for comp in out:
    bad.append("a circle across folders: " + " <-> ".join(comp))
for b in bad:
    print(b)
print(f"include_graph_test: {sum(map(len, includes.values()))} includes of {len(includes)} files, "
      f"{len(bad)} problems")
sys.exit(1 if bad else 0)
PY
