#!/usr/bin/env bash
# Checks what a shipped gmem tree (tarball, wheel, install) asks of the host, for every ELF
# file under DIR:
#   - no GLIBC_ symbol version newer than CLAIM (default: packaging/glibc-min, the oldest glibc
#     the release notes promise);
#   - no compiler runtime: no GLIBCXX_/CXXABI_/GCC_ versions, no libstdc++/libgcc_s needed;
#   - every needed library is either beside it in DIR or one of glibc's own
#     (libc, libm, libdl, libpthread, librt, ld-linux-x86-64), as manylinux requires.
# Usage: scripts/check-glibc.sh DIR [CLAIM]. Prints one line per file; exit 0 ok, 1 not.
set -uo pipefail
dir=${1:?usage: check-glibc.sh DIR [CLAIM]}
claim=${2:-$(cat "$(dirname "$0")/../packaging/glibc-min")}
glibc_own=" libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 ld-linux-x86-64.so.2 "
shipped=" $(find "$dir" -type f -name '*.so*' -printf '%f ' ) "
rc=0 max=0 n=0
while IFS= read -r -d '' f; do
  [ "$(head -c4 "$f" | od -An -c | tr -d ' ')" = 177ELF ] || continue
  n=$((n + 1))
  syms=$(objdump -T "$f")
  need=$(grep -o 'GLIBC_[0-9][0-9.]*' <<<"$syms" | sed 's/GLIBC_//' | sort -uV | tail -1)
  need=${need:-none}
  printf '%-50s GLIBC %s\n' "${f#"$dir"/}" "$need"
  if [ "$need" != none ]; then
    [ "$(printf '%s\n%s\n' "$need" "$max" | sort -V | tail -1)" = "$need" ] && max=$need
    if [ "$(printf '%s\n%s\n' "$need" "$claim" | sort -V | tail -1)" != "$claim" ]; then
      echo "  FAIL: needs GLIBC_$need, newer than the claimed $claim"; rc=1
    fi
  fi
  rt=$(grep -oE '(GLIBCXX|CXXABI|GCC)_[0-9][0-9.]*' <<<"$syms" | sort -u | tr '\n' ' ')
  [ -z "$rt" ] || { echo "  FAIL: needs the compiler runtime: $rt"; rc=1; }
  for lib in $(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    case "$glibc_own$shipped" in
      *" $lib "*) ;;
      *) echo "  FAIL: needs $lib, neither shipped nor part of glibc"; rc=1 ;;
    esac
  done
done < <(find "$dir" -type f -print0 | sort -z)
[ $n -gt 0 ] || { echo "check-glibc: no ELF files under $dir"; exit 1; }
echo "check-glibc: $n ELF files; newest glibc symbol version needed: $max; claimed: glibc >= $claim"
[ "$max" = "$claim" ] || [ $rc -ne 0 ] ||
  echo "check-glibc: note: the files need only glibc $max; packaging/glibc-min ($claim) could be lowered"
exit $rc
