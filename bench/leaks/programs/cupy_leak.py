# Leak: CuPy arrays of every step kept.
import cupy as cp

kept = []
for step in range(50):
    a = cp.random.random((512, 512))
    kept.append(a @ a)  # LEAK
cp.cuda.Device().synchronize()
