#!/usr/bin/env python3
"""JAX workload: an MLP trained with plain SGD, batch sizes cycling over six shapes (each
compiled once during warm-up), so buffers of several sizes come and go every step.

  jax_work.py --steps N --json OUT
The allocator is chosen by the environment: XLA's BFC pool by default (preallocates 75% of
the GPU), XLA_PYTHON_CLIENT_PREALLOCATE=false (BFC, grown on demand), or
XLA_PYTHON_CLIENT_ALLOCATOR=platform (no pool: every buffer a driver allocation, what gmem
serves when preloaded). Every mode must print the same losses.
"""
import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gmem_probe  # noqa: E402

BATCHES = (256, 1024, 4096, 512, 8192, 2048)
DIMS = (1024, 4096, 4096, 4096, 1024)


def init(key):
    params = []
    for a, b in zip(DIMS[:-1], DIMS[1:]):
        key, k = jax.random.split(key)
        params.append((jax.random.normal(k, (a, b), jnp.float32) / jnp.sqrt(a),
                       jnp.zeros((b,), jnp.float32)))
    return params


def loss_fn(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.gelu(x @ w + b)
    w, b = params[-1]
    return jnp.mean((x @ w + b - y) ** 2)


@jax.jit
def train_step(params, x, y):
    loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
    return [(w - 1e-3 * gw, b - 1e-3 * gb) for (w, b), (gw, gb) in zip(params, grads)], loss


def batch(i):
    n = BATCHES[i % len(BATCHES)]
    kx, ky = jax.random.split(jax.random.PRNGKey(i))
    return (jax.random.normal(kx, (n, DIMS[0]), jnp.float32),
            jax.random.normal(ky, (n, DIMS[-1]), jnp.float32))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--mode", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    params = init(jax.random.PRNGKey(0))
    losses = []
    for i in range(len(BATCHES)):  # compiles each shape once
        params, loss = train_step(params, *batch(i))
        losses.append(float(loss))
    t0 = time.perf_counter()
    out = []
    for i in range(len(BATCHES), len(BATCHES) + args.steps):
        params, loss = train_step(params, *batch(i))
        out.append(loss)
    jax.block_until_ready(params)
    elapsed = time.perf_counter() - t0
    losses += [float(x) for x in out]
    stats = jax.devices()[0].memory_stats() or {}
    rec = {"kind": "workload", "framework": "jax", "workload": "jax-mlp", "mode": args.mode,
           "steps": args.steps, "seconds": elapsed, "steps_per_s": args.steps / elapsed,
           "losses": losses, "framework_peak_reserved": stats.get("peak_pool_bytes",
                                                                  stats.get("bytes_reserved")),
           "jax_memory_stats": stats,
           "env": {k: v for k, v in os.environ.items() if k.startswith(("XLA_", "GMEM_")) or
                   k == "LD_PRELOAD"}, "jax": jax.__version__}
    gmem_probe.emit(rec, args.json)


if __name__ == "__main__":
    main()
