#!/usr/bin/env bash
# Every path of the repository that README.md and docs/*.md name exists: a file or folder
# written in backquotes or as a link (`pool/pool.h`, `interpose/upstream/stream_registry.*`,
# `vmm_upstream.{h,cpp}`, [pool.md](pool.md), a program by its source's name:
# `tests/tools/leak_sites`). A path counts when it starts with one of the
# repository's top-level folders; build/ outputs, /dev/shm and other absolute paths are not
# checked, nor is a path with a `..` component (an expression, such as the guess a
# doc says gmem never makes). Exit 0 pass, 1 fail (each missing path named with its file and line).
set -u
cd "$(dirname "$0")/../.." || exit 1
python3 - README.md docs/*.md <<'PY'
import glob, os, re, sys

tops = sorted(d for d in os.listdir(".") if os.path.isdir(d) and not d.startswith(".") and d != "build")
start = re.compile(r"^(%s)/" % "|".join(map(re.escape, tops)))

def expand(path):
    # a/{x,y}.h -> a/x.h, a/y.h
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in expand(path[:m.start()] + alt + path[m.end():])]

def exists(path):
    path = re.sub(r":\d+(-\d+)?$", "", path)  # file:line
    path = path.rstrip("/")
    if any(c in path for c in "*?["):
        return bool(glob.glob(path))
    # a program is named by its source's path without the suffix (tests/tools/leak_sites)
    return any(os.path.exists(path + ext) for ext in ("", ".cpp", ".c", ".cu", ".py"))

missing = 0
checked = 0
for doc in sys.argv[1:]:
    here = os.path.dirname(doc)
    for n, line in enumerate(open(doc, encoding="utf-8"), 1):
        candidates = []
        for code in re.findall(r"`([^`]+)`", line):
            candidates += [(w, False) for w in code.split()]
        candidates += [(t, True) for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", line)]
        for word, link in candidates:
            if re.match(r"^[a-z]+://", word):
                continue
            word = word.strip("'\",;:()").rstrip(".")
            if link and not start.match(word):
                word = os.path.normpath(os.path.join(here, word))
            if not start.match(word) or ".." in word.split("/"):
                continue
            for p in expand(word):
                checked += 1
                if not exists(p):
                    print(f"{doc}:{n}: names {p}, which does not exist")
                    missing += 1
print(f"docs_paths_test: {checked} paths checked, {missing} missing")
sys.exit(1 if missing else 0)
PY
