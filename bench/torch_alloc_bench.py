#!/usr/bin/env python3
"""Allocation cost of PyTorch's caching allocator.

Builds bench/torch_alloc_bench.cpp against the installed torch (g++, a few seconds), loads it
with ctypes after torch has initialized CUDA, and runs the shared harness in C++ threads (no
GIL). If the build fails, falls back to torch.cuda.caching_allocator_alloc/delete from Python
(one thread; includes Python call overhead) and says so in the label.

usage: torch_alloc_bench.py --build-dir DIR [harness options: --json PATH --seconds S ...]
"""
import ctypes
import json
import os
import subprocess
import sys
import time

import torch
import torch.utils.cpp_extension as ext


def build(build_dir):
    here = os.path.dirname(os.path.abspath(__file__))
    out = os.path.join(build_dir, "torch_alloc_bench.so")
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    cmd = ["g++", "-O2", "-std=c++17", "-shared", "-fPIC", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
           "-I", here]
    for p in ext.include_paths():
        cmd += ["-isystem", p]
    cmd += ["-isystem", os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")]
    cmd += [os.path.join(here, "torch_alloc_bench.cpp"), "-o", out]
    for p in ext.library_paths():
        cmd += ["-L", p, f"-Wl,-rpath,{p}"]
    cmd += ["-lc10_cuda", "-lc10", "-pthread"]
    subprocess.run(cmd, check=True)
    return out


def python_fallback(args):
    """torch.cuda.caching_allocator_alloc from Python, one thread, pair test only."""
    opts = dict(zip(args[::2], args[1::2]))
    path = opts.get("--json")
    for size in (512, 65536, 1 << 20, 16 << 20, 256 << 20):
        for _ in range(20):
            torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(size))
        samples = []
        end = time.perf_counter() + float(opts.get("--seconds", "0.25"))
        while time.perf_counter() < end and len(samples) < 20000:
            t0 = time.perf_counter_ns()
            torch.cuda.caching_allocator_delete(torch.cuda.caching_allocator_alloc(size))
            samples.append(time.perf_counter_ns() - t0)
        samples.sort()
        rec = {"kind": "alloc", "label": "torch-caching-python", "allocator":
               "torch.cuda.caching_allocator_alloc", "test": "pair", "size": size, "threads": 1,
               "samples": len(samples), "median_ns": samples[len(samples) // 2],
               "p99_ns": samples[len(samples) * 99 // 100], "mean_ns": sum(samples) / len(samples),
               "failed": False}
        print(rec)
        if path:
            with open(path, "a") as f:
                f.write(json.dumps(rec) + "\n")


def main():
    args = sys.argv[1:]
    build_dir = "."
    if "--build-dir" in args:
        i = args.index("--build-dir")
        build_dir = args[i + 1]
        del args[i:i + 2]
    torch.cuda.init()
    torch.empty(1, device="cuda")  # the allocator exists once a tensor was made
    try:
        lib = ctypes.CDLL(build(build_dir))
    except Exception as e:  # noqa: BLE001 - any build/load failure means: use the fallback
        print(f"torch_alloc_bench: C++ build failed ({e}); using the Python API", file=sys.stderr)
        python_fallback(args)
        return
    argv = [b"torch_alloc_bench"] + [a.encode() for a in args]
    arr = (ctypes.c_char_p * len(argv))(*argv)
    lib.torch_alloc_bench_main.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    rc = lib.torch_alloc_bench_main(len(argv), arr)
    python_fallback(args)  # the Python API too, for reference: what a Python caller pays
    sys.exit(rc)


if __name__ == "__main__":
    main()
