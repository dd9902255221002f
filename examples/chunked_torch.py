#!/usr/bin/env python3
"""gmem's Python helpers on a PyTorch workload: score a batch too large for the GPU in chunks
that adapt to out-of-memory, and check the result against a CPU computation.

    PYTHONPATH=python examples/chunked_torch.py [--items N] [--dim D]
    gmem run -- python3 examples/chunked_torch.py          # with the pool (and its limit)

Needs PyTorch with a GPU; without one it runs the same control flow on the CPU with a
simulated memory limit (MemoryError above 300 items per chunk), so the helpers can be tried
anywhere. Prints the plan, the retries and gmem's memory report.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import gmem  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", type=int, default=16384)
    ap.add_argument("--dim", type=int, default=1024)
    args = ap.parse_args()
    try:
        import torch
        gpu = torch.cuda.is_available()
    except ImportError:
        torch, gpu = None, False
    print(f"chunked_torch: gmem pool {'active' if gmem.available() else 'not preloaded'}; "
          f"{'PyTorch on ' + torch.cuda.get_device_name() if gpu else 'no GPU: CPU stand-in'}")

    if gpu:
        g = torch.Generator().manual_seed(0)
        x = torch.randn(args.items, args.dim, generator=g)
        w = torch.randn(args.dim, args.dim, generator=g).cuda()
        out = torch.empty(args.items)
        # Per item on the device: the input row, the product row and the activation (float32).
        per_item = 3 * args.dim * 4

        def step(begin, end):
            out[begin:end] = torch.relu(x[begin:end].cuda() @ w).sum(dim=1).cpu()

        reference = torch.relu(x @ w.cpu()).sum(dim=1)  # on the CPU: no device memory
        # Warm up first: cuBLAS takes its handle and workspace at the first product; planned
        # after that, the chunk budget counts only what the chunks themselves need.
        step(0, 1)
    else:
        x = [float(i % 97) for i in range(args.items)]
        out = [0.0] * args.items
        per_item = 1 << 20

        def step(begin, end):
            if end - begin > 300:
                raise MemoryError("simulated: out of memory")
            out[begin:end] = [v * v for v in x[begin:end]]

        reference = [v * v for v in x]

    plan = gmem.plan_chunks(args.items, per_item, available_bytes=None if gpu else 1 << 30)
    print(f"chunked_torch: plan {plan.chunk_count} chunks of {plan.chunk_items} items "
          f"({plan.bytes_per_chunk / 2**20:.1f} MiB each, budget {plan.budget_bytes / 2**20:.1f} MiB)")
    res = gmem.chunked(args.items, per_item, step, plan=plan)
    print(f"chunked_torch: {res.chunks_run} chunks, {res.ooms} out-of-memory retries, "
          f"{res.halvings} halvings, {res.growths} growths")
    if gpu:
        ok = torch.allclose(out, reference, rtol=1e-3, atol=1e-1)
    else:
        ok = out == reference
    print(f"chunked_torch: result {'matches' if ok else 'DIFFERS FROM'} the reference")
    print(gmem.memory_report(), end="")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
