#!/usr/bin/env bash
# README's option table is the one scripts/gen-docs.py generates from common/options.h (the
# table the shim parses and `gmem run --help` prints), and the man pages and the bash
# completion generate from it without error. Exit 0 pass, 1 fail.
set -u
B=${GMEM_BUILD:-build}
for f in "$B/docs/options_table" "$B/bin/gmem"; do
  [ -x "$f" ] || { echo "options_doc_test: missing $f (make builds it)"; exit 1; }
done
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
"$B/docs/options_table" >"$W/options.tsv" || exit 1
"$B/bin/gmem" --help-all >"$W/help.txt" || exit 1
python3 scripts/gen-docs.py check-readme "$W/options.tsv" README.md || {
  echo "FAIL: README.md's option table is not the generated one; fix README.md or common/options.h"
  exit 1
}
rc=0
python3 scripts/gen-docs.py man-options "$W/options.tsv" test >"$W/gmem-options.7" || rc=1
python3 scripts/gen-docs.py man-gmem "$W/help.txt" "$W/options.tsv" test >"$W/gmem.1" || rc=1
python3 scripts/gen-docs.py completion "$W/help.txt" "$W/options.tsv" >"$W/gmem.bash" || rc=1
# Every option is in the man page and the completion; every subcommand in both too.
while IFS=$'\t' read -r name _ _ _ flag _; do
  grep -q "^\\\\fB$name\\\\fR" "$W/gmem-options.7" || { echo "FAIL: $name not in gmem-options.7"; rc=1; }
  grep -q -- "$name=" "$W/gmem.bash" || { echo "FAIL: $name not completed after -e"; rc=1; }
  grep -q -- " $flag[ \"]" "$W/gmem.bash" || { echo "FAIL: $flag not completed for run"; rc=1; }
done <"$W/options.tsv"
for sub in $(sed -n '/^Subcommands:/,$p' "$W/help.txt" | grep -E '^[a-z]+$'); do
  grep -q "^\\.SS $sub\$" "$W/gmem.1" || { echo "FAIL: subcommand $sub not in gmem.1"; rc=1; }
  grep -q "^    $sub) opts=" "$W/gmem.bash" || { echo "FAIL: subcommand $sub not completed"; rc=1; }
done
bash -n "$W/gmem.bash" || rc=1
# The completion works: subcommands, run's flags, GMEM_ names after -e.
complete() { # words... -> COMPREPLY
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
           _gmem; echo "${COMPREPLY[*]}"' _ "$W/gmem.bash" "$@"
}
[ "$(complete gmem le)" = leaks ] || { echo "FAIL: completion of 'gmem le'"; rc=1; }
[ "$(complete gmem run --max-c)" = --max-cached ] || { echo "FAIL: completion of --max-c"; rc=1; }
[ "$(complete gmem run -e GMEM_LIM)" = GMEM_LIMIT= ] || { echo "FAIL: completion after -e"; rc=1; }
if command -v man >/dev/null && command -v groff >/dev/null; then
  man -l "$W/gmem.1" >/dev/null 2>"$W/man.err" || rc=1
  man -l "$W/gmem-options.7" >/dev/null 2>>"$W/man.err" || rc=1
  if [ -s "$W/man.err" ]; then echo "FAIL: man warnings:"; cat "$W/man.err"; rc=1; fi
fi
[ $rc -eq 0 ] && echo "options_doc_test: README table, man pages and completion agree with the tables"
exit $rc
