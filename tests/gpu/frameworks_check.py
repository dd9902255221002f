"""GPU program for tests/gpu/frameworks_gpu_test.sh: a short loop of a framework that frees
everything it allocates, or, with --keep, keeps arrays from one known line (marked KEEP: five
4 MiB tensors for torch and cupy, four 4 MiB arrays for jax).

Usage: frameworks_check.py torch|jax|cupy [--keep] [--wait] [--graphs] [--no-pool]
  --wait    print "ready" once the arrays are kept and wait for a line on stdin
  --graphs  torch: also a hand-captured torch.cuda.graph and torch.compile(mode="reduce-overhead")
            (they need PyTorch's caching allocator: they must work under gmem's default)
  --no-pool cupy: turn CuPy's memory pool off in the program (cupy.cuda.set_allocator(None))
"""

import sys

framework = sys.argv[1]
keep = "--keep" in sys.argv


def run_torch():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 256)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    pinned = torch.ones(1024).pin_memory()  # PyTorch's pinned host cache
    for _ in range(20):
        x = torch.randn(64, 256, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    x.copy_(pinned[:256].expand(64, 256), non_blocking=True)
    if "--graphs" in sys.argv:
        static_in = torch.randn(64, 256, device="cuda")
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                model(static_in)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = model(static_in)
        g.replay()
        compiled = torch.compile(lambda t: (t @ t).relu().sum(), mode="reduce-overhead")
        for _ in range(3):
            compiled(torch.randn(128, 128, device="cuda"))
        print(f"graphs: {float(static_out.sum()):.3f}", flush=True)
    torch.cuda.synchronize()
    print(f"loss {float(loss):.4f}", flush=True)
    del model, opt, x, loss
    kept = []
    if keep:
        for _ in range(5):
            kept.append(torch.empty(1 << 20, dtype=torch.float32, device="cuda"))  # KEEP
    torch.cuda.synchronize()
    return kept


def run_jax():
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(w, x):
        return w - 0.01 * jax.grad(lambda w: jnp.mean((x @ w) ** 2))(w)

    w = jnp.ones((256, 256))
    for i in range(20):
        w = step(w, jnp.full((64, 256), float(i)))
    w.block_until_ready()
    print(f"w {float(w.sum()):.4f}", flush=True)
    kept = []
    if keep:
        for i in range(4):
            kept.append(jnp.full((1 << 20,), float(i), dtype=jnp.float32))  # KEEP
        for a in kept:
            a.block_until_ready()
    return kept


def run_cupy():
    import cupy

    if "--no-pool" in sys.argv:
        cupy.cuda.set_allocator(None)
        cupy.cuda.set_pinned_memory_allocator(None)
    a = cupy.ones((256, 256), dtype=cupy.float32)
    for _ in range(20):
        a = (a @ a) / 256.0
    cupy.cuda.runtime.deviceSynchronize()
    print(f"a {float(a.sum()):.4f}", flush=True)
    del a
    kept = []
    if keep:
        for _ in range(5):
            kept.append(cupy.empty(1 << 20, dtype=cupy.float32))  # KEEP
    cupy.cuda.runtime.deviceSynchronize()
    return kept


runners = {"torch": run_torch, "jax": run_jax, "cupy": run_cupy}
if framework not in runners:
    sys.exit(__doc__)
arrays = runners[framework]()
if "--wait" in sys.argv:
    print("ready", flush=True)
    sys.stdin.readline()
print(f"kept {len(arrays)} arrays", flush=True)
