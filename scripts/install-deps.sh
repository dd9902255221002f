#!/usr/bin/env bash
# Installs the Debian packages gmem's build and tests need, when any is missing.
# Usage: scripts/install-deps.sh [build|package|test|demo|html]
#   build:   compilers' libraries and headers for `make` (python3: the generated man pages)
#   package: build + what `make install`, `make dist` and `make wheel` use (patchelf, python3,
#            python3-wheel)
#   test:    package + what `make test` runs (clang's libFuzzer runtime, chromium, python3-venv
#            and python3-pytest for the wheel test, cmake for the consumer projects, Debian's
#            prometheus server and curl for the exporter test)
#   html:    test + headless Chromium for the HTML report test
# Prints what it does; changes nothing when everything is present.
set -euo pipefail

want=${1:-test}
package=(patchelf python3 python3-wheel zlib1g binutils)
pkgs=(g++ make pkg-config python3 libboost-dev libunwind-dev libdw-dev libelf-dev nlohmann-json3-dev
      libfmt-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
      prometheus-cpp-dev)  # prometheus-cpp-dev: gmem-exporter (gmem exporter)
case "$want" in
  build) ;;
  package) pkgs+=("${package[@]}") ;;
  test) pkgs+=(clang libclang-rt-14-dev python3 chromium  # chromium: tests/tools/html_report_test.sh
               "${package[@]}" python3-venv python3-pip python3-pytest cmake groff-base man-db
               prometheus curl) ;;  # prometheus, curl: tests/exporter/prometheus_test.sh
  demo) pkgs+=(clang libclang-rt-14-dev python3) ;;
  html) pkgs+=(clang libclang-rt-14-dev python3 chromium) ;;
  *) echo "install-deps: unknown set '$want' (build|package|test|demo|html)" >&2; exit 2 ;;
esac

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "gmem: installing missing Debian packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "gmem: error: not root and no sudo; run as root: apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
else
  SUDO=
fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "gmem: packages installed."
