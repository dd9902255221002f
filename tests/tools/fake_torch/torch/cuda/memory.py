import os


def get_allocator_backend():
    return os.environ.get("FAKE_TORCH_BACKEND", "native")
