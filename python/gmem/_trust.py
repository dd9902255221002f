"""Which of gmem's native files may run as the caller (common/trusted_path.h, in Python).

A library preloaded into pytest, or a gmem executable it starts, runs as the user who runs the
tests (root too): only a file that nobody but root and that user can change is used."""

import os
import stat


def _component_problem(path, directory):
    try:
        st = os.lstat(path)
    except OSError:
        return f"{path} is missing"
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if directory and not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    if not directory and not stat.S_ISREG(st.st_mode):
        return f"{path} is not a regular file"
    if st.st_uid not in (0, os.geteuid()):
        return f"{path} is owned by another user (uid {st.st_uid})"
    sticky_dir = directory and st.st_mode & stat.S_ISVTX
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not sticky_dir:
        return f"{path} is writable by others"
    return None


def untrusted_problem(path, directory=False):
    """None when `path` (absolute, symbolic links resolved) and every directory above it are
    owned by root or the effective user and writable by nobody else (a sticky directory such
    as /tmp excepted: others cannot replace its entries); else why not, naming the component."""
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path"
    parts = [p for p in path.split("/") if p]
    if ".." in parts:
        return f"{path} has a '..' component"
    at = "/"
    for i, part in enumerate(parts):
        why = _component_problem(at, True)
        if why:
            return why
        at = os.path.join(at, part)
        if i == len(parts) - 1:
            return _component_problem(at, directory)
    return _component_problem(at, True)


def native_candidates(here, *parts):
    """Where gmem's layouts put PARTS (e.g. "lib", "libgmem.so") for the package directory
    `here`: the wheel (gmem/_native/), an install tree (PREFIX/share/gmem/python/gmem ->
    PREFIX/), the checkout's own build ($GMEM_BUILD, else <checkout>/build when `here` is
    <checkout>/python/gmem). Nothing else: no guess that could land in a shared directory."""
    out = [os.path.join(here, "_native", *parts)]
    installed = os.path.join("share", "gmem", "python", "gmem")
    is_installed = here.endswith(os.sep + installed)
    if is_installed:
        out.append(os.path.join(here[: -len(installed)], *parts))
    build = os.environ.get("GMEM_BUILD")
    if build:
        out.append(os.path.join(os.path.abspath(build), *parts))
    elif not is_installed and here.endswith(os.sep + os.path.join("python", "gmem")):
        out.append(os.path.join(os.path.dirname(os.path.dirname(here)), "build", *parts))
    return out


def find_trusted(explicit, candidates):
    """(path, problems): `explicit` (an environment variable's value) alone when set, else the
    first of `candidates` that exists, each resolved and checked by untrusted_problem(). `path`
    is None when none passes; `problems` says why each found file was not used."""
    problems = []
    for path in [explicit] if explicit else candidates:
        if not os.path.exists(path) and not explicit:
            continue
        real = os.path.realpath(path)
        if not os.path.isfile(real):
            problems.append(f"{path} is not a file")
            continue
        why = untrusted_problem(real)
        if why is None:
            return real, problems
        problems.append(f"{path} not used: {why}")
    return None, problems
