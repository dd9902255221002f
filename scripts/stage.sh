#!/usr/bin/env bash
# Lays out an installed gmem tree, or removes one. Used by `make install`, `make uninstall`,
# `make dist` and `make wheel` (run after `make`; reads $BUILD, default build).
#   scripts/stage.sh install DESTDIR PREFIX   files into DESTDIR/PREFIX; writes the manifest
#                                             PREFIX/share/gmem/install-manifest.txt
#   scripts/stage.sh dist DIR                 the same tree, relocatable (pkg-config and CMake
#                                             files relative to themselves), stripped, plus
#                                             INSTALL and README.md at the top
#   scripts/stage.sh uninstall DESTDIR PREFIX removes exactly the manifest's files, then the
#                                             directories the install created, if empty
# The tree (PREFIX/...):
#   bin/gmem                       RPATH $ORIGIN/../lib/gmem
#   bin/gmem-exporter              install only, when built (prometheus-cpp); system libraries
#   lib/libgmem.so                 the shim; RUNPATH $ORIGIN:$ORIGIN/gmem (it dlopen()s libunwind)
#   lib/libgmem_client.so          the client API (C ABI, include/gmem/gmem.h)
#   lib/gmem/bootstrap/            the Python bootstrap (sitecustomize.py) libgmem.so puts on
#                                  PYTHONPATH in Python processes
#   lib/gmem/*.so.*                private helper libraries (elfutils, libunwind and what they
#                                  load: liblzma, libbz2, libz), RUNPATH $ORIGIN; private so that
#                                  they never shadow the system's copies through ld.so.cache
#   include/gmem/                  gmem.h (C), chunking.hpp (C++17 or later)
#   lib/pkgconfig/gmem.pc, lib/cmake/gmem/   pkg-config and find_package(gmem) -> gmem::client
#   share/gmem/python/gmem/        the Python package (PYTHONPATH=PREFIX/share/gmem/python)
#   share/man/man1/gmem.1, share/man/man7/gmem-options.7, share/bash-completion/completions/gmem
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
VERSION=$(cat VERSION)
PRIVATE_LIBS=(libdw.so.1 libelf.so.1 libbz2.so.1.0 liblzma.so.5 libunwind.so.8 libz.so.1)

die() { echo "stage: error: $*" >&2; exit 1; }

mode=${1:-}
case "$mode" in
  install | uninstall) [ $# -eq 3 ] || die "usage: $0 $mode DESTDIR PREFIX"
    destdir=$2 prefix=$3
    case "$prefix" in /*) ;; *) die "PREFIX must be an absolute path (got '$prefix')" ;; esac
    root=$destdir$prefix ;;
  dist) [ $# -eq 2 ] || die "usage: $0 dist DIR"; root=$2 prefix= ;;
  *) die "usage: $0 install|uninstall DESTDIR PREFIX, or $0 dist DIR" ;;
esac
manifest_rel=share/gmem/install-manifest.txt

if [ "$mode" = uninstall ]; then
  m=$root/$manifest_rel
  [ -f "$m" ] || die "no manifest $m: nothing installed there (or installed with another PREFIX/DESTDIR)"
  list=$(cat "$m")  # the manifest lists itself
  n=0
  while read -r kind path; do
    [ "$kind" = f ] || continue
    case "$path" in /* | *..*) die "manifest entry '$path' is not a relative path" ;; esac
    rm -f "$root/$path" && n=$((n + 1))
  done <<<"$list"
  # Directories the install created, deepest first, only when nothing else lives in them.
  grep '^d ' <<<"$list" | cut -c3- | sort -r | while read -r d; do
    rmdir "$root/$d" 2>/dev/null || true
  done
  rm -f "$m"
  rmdir "$root/share/gmem" 2>/dev/null || true
  echo "gmem: uninstalled $n files from $root"
  exit 0
fi

need() { [ -e "$1" ] || die "$1 is missing (run make first)"; }
for f in bin/gmem lib/libgmem.so lib/libgmem_client.so lib/gmem/bootstrap/sitecustomize.py docs/gmem.1 docs/gmem-options.7 \
         docs/gmem.bash-completion; do
  need "$BUILD/$f"
done
command -v patchelf >/dev/null || die "patchelf not found (scripts/install-deps.sh package installs it)"

files=() dirs=()
mkdirs() { # dir relative to root: records each directory this run creates
  local rel=$1 acc=""
  IFS=/ read -ra parts <<<"$rel"
  for p in "${parts[@]}"; do
    acc=${acc:+$acc/}$p
    if [ ! -d "$root/$acc" ]; then mkdir -p "$root/$acc"; dirs+=("$acc"); fi
  done
}
put() { # src dest-relative mode
  mkdirs "$(dirname "$2")"
  install -m "$3" "$1" "$root/$2"
  files+=("$2")
}
text() { # dest-relative mode; content on stdin
  local tmp
  tmp=$(mktemp)
  cat >"$tmp"
  put "$tmp" "$1" "$2"
  rm -f "$tmp"
}
system_lib() { # soname -> path of the copy to ship (the build's bundle, else the system's)
  if [ -e "$BUILD/lib/$1" ]; then echo "$BUILD/lib/$1"; return; fi
  local p
  p=$(ls /usr/lib/x86_64-linux-gnu/"$1" /lib/x86_64-linux-gnu/"$1" 2>/dev/null | head -1) ||
    true
  [ -n "$p" ] || die "no $1 to ship (install its Debian package)"
  echo "$p"
}

if [ "$mode" = install ] && [ -f "$root/$manifest_rel" ]; then
  echo "gmem: replacing the install in $root (its manifest exists)"
  "$0" uninstall "$destdir" "$prefix" >/dev/null
fi
mkdir -p "$root"

put "$BUILD/bin/gmem" bin/gmem 755
patchelf --force-rpath --set-rpath '$ORIGIN/../lib/gmem' "$root/bin/gmem"
# `gmem exporter` runs it from beside gmem; built only with prometheus-cpp, whose runtime
# libraries (and elfutils' and libstdc++) it loads from the system: installed on this host
# only, never in the relocatable tarball or the wheel, which need nothing but glibc.
if [ "$mode" = install ] && [ -x "$BUILD/bin/gmem-exporter" ]; then
  put "$BUILD/bin/gmem-exporter" bin/gmem-exporter 755
fi
put "$BUILD/lib/libgmem.so" lib/libgmem.so 755
patchelf --set-rpath '$ORIGIN:$ORIGIN/gmem' "$root/lib/libgmem.so"
put "$BUILD/lib/libgmem_client.so" lib/libgmem_client.so 755
for l in "${PRIVATE_LIBS[@]}"; do
  put "$(realpath "$(system_lib "$l")")" "lib/gmem/$l" 755
  patchelf --set-rpath '$ORIGIN' "$root/lib/gmem/$l"
done
if [ "$mode" = dist ]; then
  for f in bin/gmem lib/libgmem.so lib/libgmem_client.so; do strip --strip-debug "$root/$f"; done
fi
# The Python bootstrap libgmem.so puts on PYTHONPATH; it refuses a group- or world-writable one.
put "$BUILD/lib/gmem/bootstrap/sitecustomize.py" lib/gmem/bootstrap/sitecustomize.py 644
chmod 755 "$root/lib/gmem" "$root/lib/gmem/bootstrap"
for h in include/gmem/*; do put "$h" "$h" 644; done
for p in python/gmem/*.py; do put "$p" "share/gmem/$p" 644; done
put "$BUILD/docs/gmem.1" share/man/man1/gmem.1 644
put "$BUILD/docs/gmem-options.7" share/man/man7/gmem-options.7 644
put "$BUILD/docs/gmem.bash-completion" share/bash-completion/completions/gmem 644

if [ "$mode" = dist ]; then pc_prefix='${pcfiledir}/../..'; else pc_prefix=$prefix; fi
text lib/pkgconfig/gmem.pc 644 \
  < <(sed -e "s|@PREFIX@|$pc_prefix|" -e "s|@VERSION@|$VERSION|" packaging/gmem.pc.in)
put packaging/gmemConfig.cmake lib/cmake/gmem/gmemConfig.cmake 644
text lib/cmake/gmem/gmemConfigVersion.cmake 644 \
  < <(sed -e "s|@VERSION@|$VERSION|" packaging/gmemConfigVersion.cmake.in)

if [ "$mode" = dist ]; then
  glibc=$(cat packaging/glibc-min)
  text INSTALL 644 < <(sed -e "s|@VERSION@|$VERSION|g" -e "s|@GLIBC@|$glibc|g" packaging/INSTALL.in)
  put README.md README.md 644
else
  mkdirs share/gmem
  files+=("$manifest_rel")
  {
    echo "# gmem $VERSION installed in $prefix (DESTDIR '$destdir'); make uninstall reads this"
    for d in "${dirs[@]}"; do echo "d $d"; done
    for f in "${files[@]}"; do echo "f $f"; done
  } >"$root/$manifest_rel"
  echo "gmem: installed ${#files[@]} files into $root (manifest: $prefix/$manifest_rel)"
fi
