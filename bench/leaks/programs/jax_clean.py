# Clean: a JAX loop that keeps only its parameters.
import jax
import jax.numpy as jnp

w = jnp.ones((1024, 1024))
step = jax.jit(lambda w, x: w - 1e-3 * (x.T @ jnp.tanh(x @ w)))
for i in range(40):
    x = jax.random.normal(jax.random.PRNGKey(i), (256, 1024))
    w = step(w, x)
w.block_until_ready()
