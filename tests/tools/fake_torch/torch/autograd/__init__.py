"""torch.autograd as PyTorch 2.x lays it out: backward() and grad() call the engine's entry by
the name they imported from .graph."""
from .graph import _engine_run_backward

grads = []  # what the backward passes made, kept as parameters keep their .grad


def backward(tensors, raw=False):
    grads.extend(_engine_run_backward((tensors,), raw=raw))


def grad(outputs, raw=False):
    return _engine_run_backward((outputs,), raw=raw)
