#!/usr/bin/env python3
"""Converts a memory snapshot pickle into a replay trace (bench/replay/alloc_trace.h format).

  trace_from_snapshot.py SNAPSHOT.pickle OUT.txt

Reads PyTorch's snapshot format, as written by torch.cuda.memory._snapshot() and by
`gmem export --format pytorch` from a gmem trace: device_traces[*] entries with action
'alloc' (addr, size, stream) become "a" lines; 'free_completed' (or 'free_requested' when a
trace has no completions) become "f" lines. Needs no torch.
"""
import pickle
import sys


def convert(snapshot, out):
    traces = snapshot.get("device_traces", []) if isinstance(snapshot, dict) else []
    has_completed = any(e.get("action") == "free_completed" for t in traces for e in t)
    free_action = "free_completed" if has_completed else "free_requested"
    n = 0
    out.write("# gmem-bench alloc trace v1: a <addr> <bytes> <stream> | f <addr>\n")
    for t in traces:
        for e in t:
            act = e.get("action")
            if act == "alloc":
                out.write(f"a {e['addr']:x} {e['size']} {e.get('stream', 0) or 0:x}\n")
                n += 1
            elif act == free_action:
                out.write(f"f {e['addr']:x}\n")
                n += 1
    return n


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: trace_from_snapshot.py SNAPSHOT.pickle OUT.txt")
    with open(sys.argv[1], "rb") as f:
        snapshot = pickle.load(f)
    with open(sys.argv[2], "w") as out:
        n = convert(snapshot, out)
    print(f"trace_from_snapshot: {n} events -> {sys.argv[2]}")


if __name__ == "__main__":
    main()
