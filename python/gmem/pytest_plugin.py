"""pytest plugin, registered by the gmem wheel (entry point `pytest11`: gmem).

It adds one line to pytest's header, saying whether libgmem.so is preloaded into the test
process (for example by `gmem run -- python -m pytest`), and a fixture:

    def test_pool(gmem_available):
        if not gmem_available:
            pytest.skip("not running under gmem")

`gmem_available` is gmem.available(): True when the preloaded libgmem.so answers, False when
only the client library (driver figures) or no gmem library is there. Nothing here loads a
library or touches the GPU unless a test asks for the fixture.
"""

import os

import pytest


def _preloaded():
    """True when libgmem.so is mapped into this process (read from /proc, loads nothing)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            return any(line.rstrip().endswith("/libgmem.so") for line in maps)
    except OSError:
        return "libgmem.so" in os.environ.get("LD_PRELOAD", "")


def pytest_report_header(config):  # noqa: ARG001 - pytest's hook signature
    if _preloaded():
        return "gmem: libgmem.so is preloaded (allocations pooled and traced)"
    return "gmem: not preloaded (run the tests under `gmem run -- python -m pytest`)"


@pytest.fixture
def gmem_available():
    """gmem.available(): True when libgmem.so is preloaded and its pool answers."""
    from . import api

    return api.available()
