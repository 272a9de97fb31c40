#!/usr/bin/env bash
# `make interop`: sens against the real Linux kernel (QEMU, the VM of tests/interop/vm), both ways.
# Each test's output is kept; at the end the failed tests are named and the tail of each one's
# output is printed again, so that the end of a long CI log says what failed and why.
set -uo pipefail
SENS=${1:?usage: run_all.sh path/to/sens}
HERE=$(cd "$(dirname "$0")" && pwd)
# The VM first: if it cannot be had (no QEMU, no kernel package), that is said once, here.
t0=$SECONDS
"${SENS_VM_DIR:-$HERE/vm}/build.sh" || { echo "interop: the test VM cannot be built (see above)"; exit 2; }
echo "==== test VM ready in $((SECONDS - t0)) s"
OUTS=$(mktemp -d)
trap 'rm -rf "$OUTS"' EXIT
fails=0 passes=0 failed=()
# run LABEL [VAR=VALUE...] SCRIPT: one test, its output shown and kept in $OUTS.
run() {
  local label=$1 n=$((passes + fails))
  shift
  echo "==== $label"
  local t0=$SECONDS
  if env "$@" "$SENS" 2>&1 | tee "$OUTS/$n.log"; then
    passes=$((passes + 1))
  else
    fails=$((fails + 1))
    failed+=("$label:$n")
  fi
  echo "==== $label took $((SECONDS - t0)) s"
}
for t in "$HERE"/kernel_host.sh "$HERE"/kernel_host_*.sh "$HERE"/host_*.sh \
  "$HERE"/sens_in_guest_*.sh; do
  [ -x "$t" ] || continue
  run "$(basename "$t")" "$t"
done
# The kernel host once more against cache-aware buffers (issue 12: the interop suite passes
# with --buffers tyche).
run "kernel_host.sh (BUFFERS=tyche)" BUFFERS=tyche "$HERE"/kernel_host.sh
for f in "${failed[@]}"; do
  echo "---- FAILED ${f%:*}: the last 120 lines of its output"
  tail -n 120 "$OUTS/${f##*:}.log"
done
# Last, a line or a few per failed test that say what failed (a CI log's excerpt is its end):
# the guest's failed steps and the host side's own complaints.
for f in "${failed[@]}"; do
  echo "---- ${f%:*} failed at:"
  grep -aE 'STEP [^ ]+ FAIL|did not|never|timed out|exited [1-9]|FAILURES [1-9]|cannot|error' "$OUTS/${f##*:}.log" |
    grep -av '@@NOTE dmesg' | tail -n 8 | sed 's/^/     /'
done
names=()
for f in "${failed[@]}"; do names+=("${f%:*}"); done
echo "interop: $passes passed, $fails failed${names:+ (${names[*]})}"
[ $fails = 0 ]
