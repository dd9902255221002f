# JAX on the GPU with XLA_PYTHON_CLIENT_ALLOCATOR=platform, checked against NumPy. Run by
# jax_test.sh.
import jax
import jax.numpy as jnp
import numpy as np

assert jax.devices()[0].platform == "gpu", jax.devices()
jax.config.update("jax_default_matmul_precision", "highest")  # no TF32: compare with NumPy
f = jax.jit(lambda a, b: jnp.tanh(a @ b + a.T).sum(axis=0))
rng = np.random.default_rng(0)
for i in range(40):
    n = (64, 200, 333, 512)[i % 4]  # few shapes: each new one is a compilation
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    got = np.asarray(f(jnp.asarray(a), jnp.asarray(b)))
    want = np.tanh(a @ b + a.T).sum(axis=0)
    if not np.allclose(got, want, rtol=1e-3, atol=1e-3):
        raise SystemExit(f"jax: FAIL at {i}: max diff {np.abs(got - want).max()}")
print("jax: OK")
