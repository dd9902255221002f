"""GMEM_FRAMEWORKS for `pytest --gmem`: what the re-executed pytest's environment gets.

The same table and the same line as `gmem run` (common/framework_env.cpp; tests/tools/
frameworks_env_test.sh checks that both set the same variables and print the same line):

- observe (the default): nothing is set at launch; gmem's bootstrap in the program
  (lib/gmem/bootstrap/sitecustomize.py) observes PyTorch's and CuPy's allocators per tensor
  and, when JAX is imported, has gmem's pool serve each array.
- pool: each framework variable the user has not set is set, so that gmem's pool serves and
  traces each tensor (PyTorch's CUDA graphs then fail, as they do natively in that mode).
- off: nothing is set, nothing said.

A variable the user set, to any value, is never changed.
"""

POOL_SETTINGS = (
    ("PYTORCH_NO_CUDA_MEMORY_CACHING", "1"),
    ("XLA_PYTHON_CLIENT_ALLOCATOR", "platform"),
    ("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
)
MODES = ("observe", "pool", "off")


def plan(env):
    """(variables to set as a dict, one-line message or None) for the environment `env`."""
    mode = env.get("GMEM_FRAMEWORKS", "observe")
    if mode not in MODES:
        return {}, (f"gmem: warning: GMEM_FRAMEWORKS='{mode}' is not observe, pool or off; "
                    "using observe")
    if mode != "pool":
        return {}, None
    to_set = {name: value for name, value in POOL_SETTINGS if name not in env}
    kept = [(name, env[name]) for name, _ in POOL_SETTINGS if name in env]
    msg = "gmem: GMEM_FRAMEWORKS=pool: "
    msg += ("set " + " ".join(f"{n}={v}" for n, v in to_set.items())) if to_set else "set nothing"
    if kept:
        msg += "; kept as you set them: " + " ".join(f"{n}={v}" for n, v in kept)
    msg += (" (CUDA graphs and torch.compile(mode=\"reduce-overhead\") need PyTorch's cache: "
            "--frameworks observe)")
    return to_set, msg


if __name__ == "__main__":  # prints the plan for this environment (tests)
    import os
    import sys

    values, line = plan(dict(os.environ))
    for k, v in values.items():
        print(f"{k}={v}")
    if line:
        print(line, file=sys.stderr)
