"""gmem's bootstrap: per-tensor observation of PyTorch and CuPy with no variable to set.

libgmem.so puts this directory first on PYTHONPATH when it is preloaded into a Python
interpreter (interpose/python_bootstrap.h), so Python imports this file as `sitecustomize`
while it starts. It then:

1. takes its directory off sys.path and PYTHONPATH again (children see the user's value; a
   preloaded child gets it back from its own copy of the shim);
2. runs the `sitecustomize` it shadowed (the distribution's or the user's), as site.py would;
3. watches for the program's own `import torch` / `import cupy` / `import jax` (it never
   imports them itself) and then attaches gmem to the framework's allocator: PyTorch's trace
   tracker, through libgmem.so's gmem_observe_torch_attach, right after CUDA's lazy
   initialization, and a wrapper of the autograd engine's entry so that tensors its worker
   threads allocate carry the Python line that called backward(); CuPy's memory hooks. XLA's
   allocator has no per-buffer hook, so before JAX
   runs, the variables that make XLA ask the driver for each array (served and traced by gmem's
   pool) are set where the user has not set them.

Nothing here may break the program: every error ends in one line on stderr.
"""

import os
import sys

# PyTorch's CUDACachingAllocator as gmem reads it, by version (major, minor). A row is derived
# on a machine with that PyTorch by scripts/torch_layout.cpp (docs/interpose.md, "Per-tensor
# observation"); no slot is called for a version without a verified row.
#   slot: vtable slot of CUDAAllocator::attachAllocatorTraceTracker
#   entry: sizeof(TraceEntry); action, device, addr, stream, size: byte offsets of its fields
#   alloc, free, action_max: TraceEntry::Action values ALLOC, FREE_REQUESTED, and the largest
TORCH_LAYOUTS = {
    (2, 11): dict(slot=44, entry=136, action=0, device=4, addr=8, stream=32, size=40,
                  alloc=0, free=1, action_max=8),
}
TORCH_ALLOCATOR_SYMBOL = "_ZN3c104cuda20CUDACachingAllocator9allocatorE"
OBSERVED_PYTORCH, OBSERVED_CUPY = 0, 1  # trace::observed_framework
WAIT_BACKWARD = 1  # trace::wait_kind
_HERE = os.path.dirname(os.path.abspath(__file__))


def _say(line):
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _unlist_self():
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    value = os.environ.get("PYTHONPATH")
    if value is None:
        return
    parts = value.split(os.pathsep)
    if parts and parts[0] == _HERE:
        parts = parts[1:]
    if any(parts):
        os.environ["PYTHONPATH"] = os.pathsep.join(parts)
    else:
        del os.environ["PYTHONPATH"]


def _chain_sitecustomize():
    """Runs the sitecustomize this file shadows, as site.py would have."""
    import importlib.machinery
    import importlib.util
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", sys.path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # site.py's own wording for a failing sitecustomize
        _say(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}")


def _gmem_lib():
    import ctypes
    lib = ctypes.CDLL(None)  # libgmem.so is preloaded: its symbols are in the global scope
    for name in ("gmem_observe_torch_attach", "gmem_observe_enable"):
        if not hasattr(lib, name):
            raise RuntimeError("libgmem.so is not preloaded")
    return lib


def _loaded_library(stem):
    """Path of an already loaded library whose file name starts with `stem`."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(None, 5)[-1]
                if os.path.basename(path).startswith(stem):
                    return path
    except OSError:
        pass
    return None


def _torch_layout_type():
    """The C struct gmem::trace::torch_layout (profiler/recorder/tensor_observer.h), version 1."""
    import ctypes
    u32, i32 = ctypes.c_uint32, ctypes.c_int32

    class TorchLayout(ctypes.Structure):
        _fields_ = [(n, u32) for n in (
            "struct_bytes", "version", "attach_slot", "entry_bytes", "action_offset",
            "device_offset", "addr_offset", "stream_offset", "size_offset")] + [
            (n, i32) for n in ("action_alloc", "action_free", "action_max")] + [
            ("flags", u32), ("reserved", u32)]
    return TorchLayout


def _torch_version(torch):
    text = str(getattr(torch, "__version__", ""))
    parts = text.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return None


def _attach_torch(torch, row, label):
    import ctypes
    env = os.environ
    if env.get("PYTORCH_NO_CUDA_MEMORY_CACHING") == "1":
        _say(f"gmem: {label}: PYTORCH_NO_CUDA_MEMORY_CACHING=1 as set: each tensor is served and "
             "traced by gmem's pool (CUDA graphs need PyTorch's cache)")
        return
    backend = torch.cuda.memory.get_allocator_backend()
    if backend != "native":
        _say(f"gmem: {label}: allocator backend {backend} as set: each tensor is served and "
             "traced by gmem's stream-ordered path")
        return
    path = _loaded_library("libc10_cuda.so")
    if path is None:
        _say(f"gmem: {label}: libc10_cuda.so is not loaded; per-tensor observation not "
             "available, its cached segments are recognised as its cache")
        return
    var = ctypes.c_void_p.in_dll(ctypes.CDLL(path), TORCH_ALLOCATOR_SYMBOL)
    conf = env.get("PYTORCH_CUDA_ALLOC_CONF", "") + "," + env.get("PYTORCH_ALLOC_CONF", "")
    expandable = "expandable_segments:true" in conf.replace(" ", "").lower()
    layout_type = _torch_layout_type()
    layout = layout_type(ctypes.sizeof(layout_type), 1, row["slot"], row["entry"],
                          row["action"], row["device"], row["addr"], row["stream"], row["size"],
                          row["alloc"], row["free"], row["action_max"],
                          0 if expandable or env.get("GMEM_ENABLE") == "0" else 1, 0)
    attach = _gmem_lib().gmem_observe_torch_attach
    attach.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    attach.restype = ctypes.c_int
    attach(ctypes.addressof(var), ctypes.addressof(layout), label.encode(), 0)


def _wrap_backward(torch):
    """Wraps the autograd engine's entry, torch.autograd.graph._engine_run_backward (PyTorch 2.x:
    torch.autograd.backward, torch.autograd.grad and Tensor.backward all go through it;
    torch.autograd calls it by the name it imported, so both names are replaced). While a thread
    waits in it, the engine's worker threads (pt_autograd_<device>) run the backward pass and
    allocate the gradients; libgmem.so records them with this thread's Python frames, marked
    "via backward()" (profiler/recorder/waiting_frames.h). Two ctypes calls per backward()."""
    import ctypes
    import functools
    autograd = getattr(torch, "autograd", None)
    graph = getattr(autograd, "graph", None)
    run = getattr(graph, "_engine_run_backward", None)
    if run is None or getattr(run, "_gmem_wrapped", False):
        return
    lib = _gmem_lib()
    begin, end = lib.gmem_python_wait_begin, lib.gmem_python_wait_end
    begin.argtypes, begin.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_uint
    end.argtypes, end.restype = [ctypes.c_uint], None

    @functools.wraps(run)
    def _engine_run_backward(*args, **kwargs):
        token = begin(WAIT_BACKWARD, 1)  # 1: this frame
        try:
            return run(*args, **kwargs)
        finally:
            if token:
                end(token)

    _engine_run_backward._gmem_wrapped = True
    graph._engine_run_backward = _engine_run_backward
    if getattr(autograd, "_engine_run_backward", None) is run:
        autograd._engine_run_backward = _engine_run_backward


def _on_torch(torch):
    try:
        _wrap_backward(torch)
    except Exception as e:
        _say(f"gmem: warning: PyTorch: backward() lines not attributed: {type(e).__name__}: {e}")
    version = _torch_version(torch)
    label = "PyTorch %d.%d" % version if version else "PyTorch"
    row = TORCH_LAYOUTS.get(version)
    if row is None:
        known = ", ".join("%d.%d" % v for v in sorted(TORCH_LAYOUTS))
        _say(f"gmem: {label}: per-tensor observation not available (gmem knows the allocator of "
             f"PyTorch {known}); its cached segments are recognised as its cache")
        return

    def attach():
        try:
            _attach_torch(torch, row, label)
        except Exception as e:  # never into PyTorch's lazy initialization
            _say(f"gmem: warning: {label}: per-tensor observation not attached: "
                 f"{type(e).__name__}: {e}")

    torch.cuda._lazy_call(attach)


def _on_cupy(cupy):
    import ctypes
    import threading
    from cupy.cuda import memory_hook
    lib = _gmem_lib()
    if not lib.gmem_observe_enable(OBSERVED_CUPY):
        return
    alloc, free = lib.gmem_observe_alloc, lib.gmem_observe_free
    alloc.argtypes = [ctypes.c_size_t, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_int,
                      ctypes.c_size_t]
    alloc.restype = None
    free.argtypes = [ctypes.c_size_t, ctypes.c_int]
    free.restype = None

    class GmemHook(memory_hook.MemoryHook):
        """Records each block CuPy's memory pool hands out and takes back (hooks are
        per thread: entered on the importing thread and on every thread started after)."""
        name = "gmem"

        def malloc_postprocess(self, device_id, size, mem_size, mem_ptr, pmem_id):
            alloc(mem_ptr, size, mem_size, device_id, 0)

        def free_preprocess(self, device_id, mem_size, mem_ptr, pmem_id):
            free(mem_ptr, device_id)  # before the block can be handed out again

    def enter():
        try:
            GmemHook().__enter__()
        except Exception:
            pass

    enter()
    start = getattr(threading.Thread, "_bootstrap_inner", None)
    if start is not None:
        def _bootstrap_inner(self):
            enter()
            return start(self)
        threading.Thread._bootstrap_inner = _bootstrap_inner
    _say("gmem: CuPy: memory pool kept; each array traced with its line")


JAX_POOL_SETTINGS = (("XLA_PYTHON_CLIENT_ALLOCATOR", "platform"),
                     ("XLA_PYTHON_CLIENT_PREALLOCATE", "false"))


def _before_jax():
    """XLA's BFC arena cannot be observed per array; with these variables XLA asks the driver
    for each array and gmem's pool serves it (common/framework_env.h). Read by JAX when it
    creates its GPU client, after this import. A value the user set is kept."""
    env = os.environ
    to_set = [(n, v) for n, v in JAX_POOL_SETTINGS if n not in env]
    kept = [(n, env[n]) for n, _ in JAX_POOL_SETTINGS if n in env]
    for n, v in to_set:
        env[n] = v
    line = "gmem: JAX: XLA's arena cannot be observed per array; "
    if to_set:
        line += "set " + " ".join(f"{n}={v}" for n, v in to_set)
        line += ": each array comes from gmem's pool, traced with its line"
    else:
        line += "nothing set"
    if kept:
        line += "; kept as you set them: " + " ".join(f"{n}={v}" for n, v in kept)
    _say(line)


class _ImportWatch:
    """A meta path finder that lets the first import of a watched package run and calls its
    handlers around it: `before` just before the package's code runs, the other with the
    module once it ran. Finds nothing itself: it wraps the loader of the spec the other finders
    found. A spec that is only looked at (importlib.util.find_spec, as libraries do to see
    whether a framework is installed) runs nothing; the handlers run once, at the import that
    executes the package."""

    def __init__(self, handlers, before=None):
        self.handlers = dict(handlers)
        self.before = dict(before or {})

    def find_spec(self, name, path=None, target=None):
        if name not in self.handlers and name not in self.before:
            return None
        spec = None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            if finder is self or find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        loader = getattr(spec, "loader", None)
        run = getattr(loader, "exec_module", None)
        if run is None:  # not installed, or a loader of the old protocol: left alone
            return spec

        def exec_module(module):
            try:
                del loader.exec_module  # the loader's own method again
            except AttributeError:
                pass
            early = self.before.pop(name, None)
            if early is not None:
                _call(lambda _: early(), None, name)
            late = self.handlers.pop(name, None)
            run(module)
            if late is not None:
                _call(late, module, name)

        try:
            loader.exec_module = exec_module
        except Exception:
            pass
        return spec


def _call(handler, module, name):
    try:
        handler(module)
    except Exception as e:
        _say(f"gmem: warning: {name}: per-allocation observation not set up: "
             f"{type(e).__name__}: {e}")


def _collect_at_exit():
    """Registered before the program's code runs, so it runs after every atexit handler of the
    program: a garbage collection while the program's code may still free, before the
    interpreter's shutdown begins. Frees made once it has begun keep their allocations, marked
    held to exit (docs/interpose.md, "At exit"); objects in reference cycles the program
    dropped are garbage it no longer holds, which without this would only be freed by the
    shutdown's own collection. A program that
    turned the collector off keeps it off."""
    import atexit
    import gc

    def collect():
        if gc.isenabled():
            gc.collect()

    atexit.register(collect)


def _install():
    _collect_at_exit()
    mode = os.environ.get("GMEM_FRAMEWORKS", "observe")
    if mode == "off":  # a value other than observe, pool and off means observe (the shim said so)
        return
    handlers = {"torch": _on_torch, "cupy": _on_cupy}
    before = {"jax": _before_jax} if mode != "pool" else {}  # pool: `gmem run` set them
    for name in list(handlers):
        if name in sys.modules:  # imported already (a .pth file): no import left to watch
            _call(handlers.pop(name), sys.modules[name], name)
    before = {n: f for n, f in before.items() if n not in sys.modules}
    if handlers or before:
        sys.meta_path.insert(0, _ImportWatch(handlers, before))


try:
    _unlist_self()
    _install()
except Exception as _e:
    _say(f"gmem: warning: Python bootstrap failed: {type(_e).__name__}: {_e}")
try:
    _chain_sitecustomize()
except Exception as _e:
    _say(f"gmem: warning: could not run the shadowed sitecustomize: {type(_e).__name__}: {_e}")
