#!/usr/bin/env bash
# Runs each libFuzzer target of a SENS_FUZZ build for SECONDS over its seed corpus
# (tests/fuzz/corpus/NAME, read only; new inputs go to BUILD/fuzz-corpus/NAME). A crash, a
# hang (an input over 20 s), a leak or a sanitizer report fails the run and leaves the input
# in BUILD/fuzz-artifacts: rerun it with `BUILD/fuzz_NAME FILE`.
set -euo pipefail
build=${1:-build-fuzz}
seconds=${2:-60}
src="$(cd "$(dirname "$0")" && pwd)"
rc=0
names=()
for source in "$src"/fuzz_*.cc; do
  name=$(basename "$source" .cc)
  names+=("${name#fuzz_}")
done
for name in "${names[@]}"; do
  bin="$build/fuzz_$name"
  scratch="$build/fuzz-corpus/$name"
  artifacts="$build/fuzz-artifacts"
  mkdir -p "$scratch" "$artifacts"
  log="$build/fuzz-$name.log"
  echo "fuzz_$name: ${seconds} s over $src/corpus/$name"
  status=0
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 "$bin" -max_total_time="$seconds" \
    -timeout=20 -print_final_stats=1 -artifact_prefix="$artifacts/$name-" \
    "$scratch" "$src/corpus/$name" > "$log" 2>&1 || status=$?
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^Done [0-9]+ runs|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' "$log" || true
  if [ "$status" -ne 0 ]; then
    echo "fuzz_$name FAILED (exit $status); the end of $log:" >&2
    tail -n 60 "$log" >&2
    rc=1
  fi
done
exit "$rc"
