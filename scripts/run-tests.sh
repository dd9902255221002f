#!/usr/bin/env bash
# Runs test programs and prints one closing line: "tests: N passed, N failed[, N skipped]".
# Each argument is an executable: a GoogleTest binary (its test counts are summed) or a
# script/program that exits 0 (pass), 77 (skip) or anything else (fail) and counts as one.
# Environment: GMEM_TEST_FILTER (a gtest filter), GMEM_TEST_LOG (directory for logs).
set -u
log_dir=${GMEM_TEST_LOG:-build/test-logs}
mkdir -p "$log_dir"
passed=0 failed=0 skipped=0 failures=()
for t in "$@"; do
  name=$(basename "$t")
  log="$log_dir/$name.log"
  if [ ! -x "$t" ]; then
    failed=$((failed + 1)); failures+=("$name"); echo "FAIL $name (not built)"; continue
  fi
  if grep -qa 'gtest_list_tests' "$t"; then  # a GoogleTest binary
    "$t" ${GMEM_TEST_FILTER:+--gtest_filter=$GMEM_TEST_FILTER} >"$log" 2>&1
    rc=$?
    p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$log" | tail -1)
    p=${p:-0} f=${f:-0} s=${s:-0}
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi  # crashed before its summary
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    if [ "$f" -ne 0 ]; then failures+=("$name"); echo "FAIL $name ($f failed; log: $log)"; else if [ "$s" -ne 0 ]; then echo "ok   $name ($p passed, $s skipped)"; else echo "ok   $name ($p passed)"; fi; fi
  else
    "$t" >"$log" 2>&1
    rc=$?
    case $rc in
      0) passed=$((passed + 1)); echo "ok   $name" ;;
      77) skipped=$((skipped + 1)); echo "skip $name: $(tail -1 "$log")" ;;
      *) failed=$((failed + 1)); failures+=("$name"); echo "FAIL $name (exit $rc; log: $log)"; tail -20 "$log" | sed 's/^/     | /' ;;
    esac
  fi
done
[ ${#failures[@]} -gt 0 ] && echo "failed: ${failures[*]}"
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
