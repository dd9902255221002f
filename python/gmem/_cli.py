"""The `gmem` command of the wheel: runs the gmem executable shipped inside this package
(gmem/_native/bin/gmem), which preloads gmem/_native/lib/libgmem.so (found as ../lib/ from
itself) into the program it runs."""

import os
import sys


def native_dir():
    """Where the wheel keeps the native tree (bin/gmem, lib/libgmem.so, lib/gmem/...)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native")


def main():
    exe = os.path.join(native_dir(), "bin", "gmem")
    if not os.access(exe, os.X_OK):
        sys.stderr.write(f"gmem: error: {exe} is missing or not executable; this gmem package "
                         "has no native part (install the wheel, or use PREFIX/bin/gmem)\n")
        return 127
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, ["gmem"] + sys.argv[1:])
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
