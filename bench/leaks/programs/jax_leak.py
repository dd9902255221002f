# Leak: JAX arrays of every step kept (served by gmem's pool: XLA's own allocator off).
import jax
import jax.numpy as jnp

kept = []
w = jnp.ones((1024, 1024))
for step in range(40):
    x = jax.random.normal(jax.random.PRNGKey(step), (256, 1024))
    y = jnp.tanh(x @ w)  # LEAK
    kept.append(y)
    y.block_until_ready()
