"""pytest plugin, registered by the gmem wheel (entry point `pytest11`: gmem).

Always: one line in pytest's header saying whether libgmem.so is preloaded, the
`gmem_available` fixture, and the markers below (registered, so `--strict-markers` accepts
them).

With `pytest --gmem` the tests run under gmem and each test's GPU memory is measured: its peak
above what was live when it started, and what it left outstanding. The terminal summary lists
them, and two markers fail a test:

    @pytest.mark.gmem_limit("2 GiB")         # peak above the start > 2 GiB: fail
    def test_forward(): ...

    @pytest.mark.gmem_no_leaks(warmups=1)    # run once first (caches fill), then measure:
    def test_step(): ...                     # anything it allocated still live: fail

A failure lists the test's outstanding allocations by Python call site (`gmem leaks --max-age`
on the test process's own trace), so it names the lines.

How it tracks: when pytest was started under the shim (`gmem run -- pytest --gmem`, or
LD_PRELOAD), it reads the pool's counters through the client API (gmem.api). When it was not,
`--gmem` re-executes pytest with libgmem.so in LD_PRELOAD (the wheel's, an installed one, the
checkout's own build, or $GMEM_SHIM; only a file that nobody but root and the user can change,
nor any directory above it: gmem/_trust.py), before any test runs, with GMEM_FRAMEWORKS
applied as `gmem run` applies it (gmem/_frameworks.py). When that is impossible (no libgmem.so, or
the preload did not take), it says so in the header and the summary: the figures then come
from the driver (device memory in use, cuMemGetInfo through libgmem_client.so) and the markers
are not enforced.
"""

import json
import os
import subprocess
import sys
import warnings

import pytest

from . import _frameworks, _trust

_REEXEC = "GMEM_PYTEST_REEXEC"  # set in the re-executed pytest: never re-exec twice


def _mapped(path):
    """True when the file at `path` (same device and inode) is mapped into this process."""
    try:
        st = os.stat(path)
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                fields = line.split(None, 5)
                if len(fields) < 6 or ":" not in fields[3]:
                    continue
                major, minor = (int(x, 16) for x in fields[3].split(":", 1))
                if (int(fields[4]) == st.st_ino and major == os.major(st.st_dev)
                        and minor == os.minor(st.st_dev)):
                    return True
    except (OSError, ValueError):
        pass
    return False


def _preloaded():
    """True when libgmem.so is mapped into this process (read from /proc, loads nothing).

    After our own re-exec, only the very file we put into LD_PRELOAD counts: a library of the
    same name mapped from anywhere else (another user's, picked up by a split LD_PRELOAD) is
    not the shim. Otherwise a mapped libgmem.so counts when root or we own it and nobody else
    may write it."""
    expected = os.environ.get(_REEXEC, "")
    if expected.startswith("/"):
        return _mapped(expected)
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(None, 5)[5].rstrip("\n") for line in maps
                     if len(line.split(None, 5)) == 6}
    except OSError:
        return False
    for path in paths:
        if not path.endswith("/libgmem.so"):
            continue
        try:
            st = os.stat(path)
        except OSError:
            continue
        if st.st_uid in (0, os.geteuid()) and not st.st_mode & 0o022 and _mapped(path):
            return True
    return False


def preload_problem(path):
    """Why `path` cannot go into LD_PRELOAD, or None: the loader splits LD_PRELOAD at spaces
    and colons, so "/opt/gm space/lib/libgmem.so" would load "space/lib/libgmem.so" relative to
    the working directory (anybody's library) instead."""
    if any(c in path for c in " :\t\n"):
        return (f"{path!r} contains a space or a colon, where the dynamic loader splits "
                "LD_PRELOAD; install gmem under a path without them or set GMEM_SHIM to one")
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path"
    return None


def _native(env_name, *parts):
    """(path, problems) of gmem's file PARTS: $ENV_NAME alone when set, else where gmem's
    layouts put it (gmem/_trust.py); only a file nobody but root and the user can change."""
    here = os.path.dirname(os.path.abspath(__file__))
    return _trust.find_trusted(os.environ.get(env_name), _trust.native_candidates(here, *parts))


def find_shim():
    """Path of libgmem.so to preload, or None."""
    return _native("GMEM_SHIM", "lib", "libgmem.so")[0]


def find_tool():
    """Path of the gmem executable, or None."""
    path, _ = _native("GMEM_TOOL", "bin", "gmem")
    if path and os.access(path, os.X_OK):
        return path
    for d in os.environ.get("PATH", "").split(os.pathsep):
        path = os.path.join(d, "gmem")
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    return None


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
          "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
          "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(value):
    """2 GiB, 512M, 4096 -> bytes (binary units, as everywhere in gmem); ValueError if not."""
    if isinstance(value, int) and value >= 0:
        return value
    text = str(value).strip().lower().replace(" ", "")
    num = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(num):]
    if not num or unit not in _UNITS:
        raise ValueError(f"{value!r} is not a size (e.g. 2 GiB, 512M, 4096)")
    return int(float(num) * _UNITS[unit])


def format_bytes(n):
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def pytest_addoption(parser):
    group = parser.getgroup("gmem", "GPU memory (gmem)")
    group.addoption("--gmem", action="store_true", default=False,
                    help="run the tests under gmem: per-test GPU peak and outstanding bytes, "
                         "gmem_limit / gmem_no_leaks markers enforced (re-executes pytest under "
                         "libgmem.so when it is not preloaded)")
    group.addoption("--gmem-sites", type=int, default=5, metavar="N",
                    help="call sites listed per failing test (default 5)")


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "gmem_limit(limit): with --gmem, fail the test when its GPU memory peak "
                   "above what was live when it started exceeds LIMIT (bytes or '2 GiB')")
    config.addinivalue_line(
        "markers", "gmem_no_leaks(warmups=0): with --gmem, run the test WARMUPS times first, "
                   "then fail it when GPU memory it allocated is still live after it")
    if not config.getoption("gmem"):
        return
    why = None
    if not _preloaded():
        shim, problems = _native("GMEM_SHIM", "lib", "libgmem.so")
        if os.environ.get(_REEXEC):
            why = "pytest was re-executed under libgmem.so but the preload did not take"
        elif shim is None:
            why = ("no libgmem.so found (install the gmem wheel, set GMEM_SHIM, or run "
                   "`gmem run -- pytest --gmem`)")
            if problems:
                why = "no libgmem.so that only root or you can change: " + "; ".join(problems)
        elif preload_problem(shim):
            why = "cannot preload " + preload_problem(shim)
        else:
            _reexec(config, shim)  # does not return
    config.pluginmanager.register(_Tracker(config, why), "gmem-tracker")


def _reexec(config, shim):
    capman = config.pluginmanager.getplugin("capturemanager")
    if capman is not None:
        capman.suspend_global_capture(in_=True)
    env = dict(os.environ)
    env["LD_PRELOAD"] = shim + (":" + env["LD_PRELOAD"] if env.get("LD_PRELOAD") else "")
    env[_REEXEC] = shim  # the re-executed pytest checks that this very file is mapped
    settings, line = _frameworks.plan(env)  # GMEM_FRAMEWORKS, as gmem run applies it
    env.update(settings)
    args = [sys.executable, "-m", "pytest"] + list(config.invocation_params.args)
    sys.stdout.flush()
    sys.stderr.flush()
    sys.stderr.write(f"gmem: re-running pytest with LD_PRELOAD={shim}\n")
    if line:
        sys.stderr.write(line + "\n")
    sys.stderr.flush()
    os.chdir(str(config.invocation_params.dir))
    os.execve(sys.executable, args, env)


def pytest_report_header(config):
    tracker = config.pluginmanager.get_plugin("gmem-tracker")
    if tracker is not None and tracker.why:
        return (f"gmem: CANNOT TRACK GPU allocations: {tracker.why}; figures come from the "
                "driver and gmem markers are not enforced")
    if _preloaded():
        return "gmem: libgmem.so is preloaded (allocations pooled and traced)"
    return "gmem: not preloaded (pytest --gmem, or `gmem run -- python -m pytest`)"


class _Tracker:
    """Measures each test through the client API; fails tests over their markers."""

    def __init__(self, config, why):
        self.config = config
        self.why = why  # None: tracking through the shim; else why not
        self.results = []  # (nodeid, peak above start, outstanding)
        self.failures = {}  # nodeid -> message
        self.notes = []  # framework caches that grew during a gmem_no_leaks test
        self._count = 0

    # -- measurements ------------------------------------------------------------------
    def _devices(self):
        from . import api

        out = []
        for device in range(64):
            try:
                out.append(api.stats(device))
            except Exception:  # noqa: BLE001 - no such device, or no library: stop there
                break
        return out

    def _live(self):
        stats = self._devices()
        if self.why:  # driver figures: memory in use on the devices
            return sum(s.device_total_bytes - s.device_free_bytes for s in stats), 0
        return sum(s.live_bytes for s in stats), sum(s.peak_live_bytes for s in stats)

    def _sites(self, marker, at_peak):
        tool = find_tool()
        if tool is None:
            return "    (no gmem executable found to list call sites: set GMEM_TOOL)\n"
        # --all: after the warm-ups, what the test left is its own, whatever the run's verdict
        # (one execution shows no growth; leak_verdict.h is about the whole run).
        cmd = [tool, "leaks", str(os.getpid()), "--since-marker", marker, "--all",
               "--top", str(self.config.getoption("gmem_sites")), "--frames", "6"]
        if at_peak:
            cmd.append("--at-peak")
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as e:
            return f"    (gmem leaks failed: {e})\n"
        lines = [ln for ln in r.stdout.splitlines()[1:]
                 if not ln.startswith("The process is still running")]
        return "\n".join(lines).strip("\n") + "\n"

    @staticmethod
    def _tensors_observed():
        """Whether gmem may be observing a framework's allocator per tensor in this process
        (lib/gmem/bootstrap/sitecustomize.py: PyTorch, CuPy)."""
        return (os.environ.get("GMEM_FRAMEWORKS", "observe") != "off"
                and any(m in sys.modules for m in ("torch", "cupy")))

    def _leaked_tensors(self, marker):
        """Bytes of tensors (alloc kind tensor) allocated since `marker` and still live, not
        suppressed; 0 when none or when gmem cannot say."""
        tool = find_tool()
        if tool is None:
            return 0
        cmd = [tool, "leaks", str(os.getpid()), "--since-marker", marker, "--all", "--json"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
            report = json.loads(r.stdout)
        except (OSError, subprocess.SubprocessError, ValueError):
            return 0
        return sum(s.get("bytes", 0) for s in report.get("sites", [])
                   if "tensor" in s.get("kinds", []))

    def _cache_held(self, marker):
        """(cached bytes, caches) when everything the test left outstanding since `marker` is
        held by a framework's caching allocator (gmem leaks lists it apart: PyTorch's cached
        segments, not the test's tensors); None otherwise or when gmem cannot say."""
        tool = find_tool()
        if tool is None:
            return None
        cmd = [tool, "leaks", str(os.getpid()), "--since-marker", marker, "--all", "--json"]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=False)
            report = json.loads(r.stdout)
        except (OSError, subprocess.SubprocessError, ValueError):
            return None
        if report.get("total_count", 1) != 0 or not report.get("cached_count"):
            return None
        caches = ", ".join(c.get("cache", "?") for c in report.get("framework_caches", []))
        return report.get("cached_bytes", 0), caches

    # -- hooks ---------------------------------------------------------------------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        limit_mark = item.get_closest_marker("gmem_limit")
        leak_mark = item.get_closest_marker("gmem_no_leaks")
        limit = None
        if limit_mark is not None:
            if not limit_mark.args:
                raise pytest.UsageError(f"{item.nodeid}: gmem_limit needs a size, e.g. "
                                        "gmem_limit('2 GiB')")
            limit = parse_size(limit_mark.args[0])
        warmups = int(leak_mark.kwargs.get("warmups", 0)) if leak_mark is not None else 0
        if self.why and (limit_mark or leak_mark):
            warnings.warn(pytest.PytestWarning(
                f"gmem markers not enforced: {self.why}"), stacklevel=1)
        for _ in range(warmups):
            item.runtest()
        from . import api

        if not self.why:
            api.reset_peak()
        before, _ = self._live()
        self._count += 1
        start = f"pytest {self._count} {item.nodeid}"[:200]  # the test's window in the trace
        if not self.why:
            api.mark(start)
        outcome = yield
        after, peak = self._live()
        peak_above = max(peak, after) - before if not self.why else max(after - before, 0)
        outstanding = after - before
        self.results.append((item.nodeid, peak_above, outstanding))
        if self.why or outcome.excinfo is not None:
            return
        msg = ""
        if limit is not None and peak_above > limit:
            msg += (f"gmem: GPU memory peak {format_bytes(peak_above)} above the start exceeds "
                    f"gmem_limit {format_bytes(limit)}. Allocations made by the test and live "
                    f"at its peak, by call site:\n" + self._sites(start, at_peak=True))
        held = self._cache_held(start) if leak_mark is not None and outstanding > 0 else None
        if held is not None:  # the cache grew, not the test's tensors: noted, not failed
            self.notes.append(f"{item.nodeid}: {format_bytes(held[0])} outstanding is held by "
                              f"{held[1]} (its cached segments, not the test's tensors): not "
                              "counted by gmem_no_leaks")
        elif leak_mark is not None and outstanding > 0:
            msg += (f"gmem: {format_bytes(outstanding)} of GPU memory allocated by the test is "
                    f"still live after it (gmem_no_leaks, {warmups} warm-up runs), by call "
                    f"site:\n" + self._sites(start, at_peak=False))
        elif leak_mark is not None and self._tensors_observed():
            # A tensor kept in a segment the cache already had leaves the pool's figures as
            # they were: the trace's tensors say it.
            kept = self._leaked_tensors(start)
            if kept:
                msg += (f"gmem: {format_bytes(kept)} of tensors allocated by the test are still "
                        f"live after it (gmem_no_leaks, {warmups} warm-up runs), by call "
                        f"site:\n" + self._sites(start, at_peak=False))
        if msg:
            self.failures[item.nodeid] = msg

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if call.when == "call" and report.passed and item.nodeid in self.failures:
            report.outcome = "failed"
            report.longrepr = self.failures[item.nodeid]

    def pytest_terminal_summary(self, terminalreporter):
        tr = terminalreporter
        tr.section("gmem: GPU memory per test")
        if self.why:
            tr.write_line(f"CANNOT TRACK GPU allocations: {self.why}.")
            tr.write_line("Figures below are device memory in use (driver), markers not enforced.")
        tr.write_line(f"{'peak':>12} {'outstanding':>12}  test")
        for nodeid, peak, outstanding in self.results:
            tr.write_line(f"{format_bytes(peak):>12} {format_bytes(outstanding):>12}  {nodeid}")
        for note in self.notes:
            tr.write_line(f"gmem: {note}")


@pytest.fixture
def gmem_available():
    """gmem.available(): True when libgmem.so is preloaded and its pool answers."""
    from . import api

    return api.available()
