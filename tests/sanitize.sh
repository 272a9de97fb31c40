#!/usr/bin/env bash
# Runs the test suite of a SENS_SANITIZE build (make sanitize). Any ASan, UBSan or LSan report
# fails the run, the reports of `sens` children included: the sanitizers write them to files in
# BUILD/sanitizer-logs (a child killed by a test, or whose exit code a test ignores, still
# leaves its report there), and the run fails unless that folder stays empty.
# Usage: tests/sanitize.sh BUILD [CTEST ARGS...], e.g. -R target to run one test binary.
set -euo pipefail
build=${1:-build-asan}
shift || true
logs="$(cd "$build" && pwd)/sanitizer-logs"
rm -rf "$logs"
mkdir -p "$logs"
# Children inherit these (the tests start SENS_BINARY, the sanitized sens of this build).
export ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:strict_string_checks=1:log_path=$logs/report"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$logs/report"
export LSAN_OPTIONS="log_path=$logs/report"
rc=0
(cd "$build" && ctest --output-on-failure -j 2 "$@") || rc=$?
reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
  for f in $reports; do
    echo "=== sanitizer report $f"
    cat "$f"
  done
  echo "sanitize: $(echo "$reports" | wc -l) sanitizer report(s), see above" >&2
  exit 1
fi
if [ "$rc" -ne 0 ]; then
  echo "sanitize: tests failed (no sanitizer report)" >&2
fi
exit "$rc"
