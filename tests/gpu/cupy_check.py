# CuPy arithmetic with cupy.cuda.set_allocator(None) (every array a cudaMalloc), checked
# against NumPy. Run by cupy_test.sh.
import cupy as cp
import numpy as np

cp.cuda.set_allocator(None)
cp.cuda.set_pinned_memory_allocator(None)
rng = np.random.default_rng(0)
for i in range(60):
    n = 64 + (i * 37) % 700
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    ga, gb = cp.asarray(a), cp.asarray(b)
    got = cp.asnumpy(cp.tanh(ga @ gb + ga.T).sum(axis=0))
    want = np.tanh(a @ b + a.T).sum(axis=0)
    if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
        raise SystemExit(f"cupy: FAIL at {i}: max diff {np.abs(got - want).max()}")
print("cupy: OK")
