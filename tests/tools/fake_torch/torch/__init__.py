"""A stand-in for PyTorch's package, for tests/tools/observe_e2e_test.sh and
backward_line_e2e_test.sh: what gmem's bootstrap uses of it (__version__, torch.cuda._lazy_call,
torch.cuda.memory.get_allocator_backend, torch.autograd.graph._engine_run_backward) over the
stand-in libc10_cuda.so (tests/tools/fake_framework_libs.cpp, FAKE_LIB=1), which the test puts in
torch/lib/. FAKE_TORCH_VERSION and FAKE_TORCH_BACKEND change what it claims to be."""
import ctypes
import os

__version__ = os.environ.get("FAKE_TORCH_VERSION", "2.11.0+cu130")
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libc10_cuda.so"))
_lib.fake_c10_cuda_tensor.argtypes = [ctypes.c_size_t]
_lib.fake_c10_cuda_tensor.restype = ctypes.c_size_t
_lib.fake_c10_cuda_free.argtypes = [ctypes.c_size_t]
_lib.fake_c10_cuda_emit.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint64]
_lib.fake_c10_cuda_run_backward.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                                            ctypes.POINTER(ctypes.c_uint64)]

from . import cuda  # noqa: E402  (as PyTorch's own __init__ does)
from . import autograd  # noqa: E402


class Tensor:
    def __init__(self, nbytes):
        self.nbytes = nbytes
        self.ptr = _lib.fake_c10_cuda_tensor(nbytes)
        if not self.ptr:
            raise RuntimeError("fake torch: out of memory")

    def __del__(self):
        _lib.fake_c10_cuda_free(self.ptr)

    def backward(self, raw=False):  # as torch/_tensor.py: through torch.autograd.backward
        autograd.backward(self, raw=raw)


def empty(nbytes):
    cuda._lazy_init()
    return Tensor(nbytes)
