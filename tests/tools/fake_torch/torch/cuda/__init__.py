"""torch.cuda's lazy initialization, as gmem's bootstrap relies on it: _lazy_call(fn) runs fn
right after initialization, or at once when initialized already."""
from .. import _lib
from . import memory  # noqa: F401

_initialized = False
_queued = []


def is_initialized():
    return _initialized


def _lazy_call(fn, **kwargs):
    if _initialized:
        fn()
    else:
        _queued.append(fn)


def _lazy_init():
    global _initialized
    if _initialized:
        return
    _lib.fake_c10_cuda_init()
    _initialized = True
    for fn in _queued:
        fn()


def init():
    _lazy_init()
