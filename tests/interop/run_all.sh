#!/usr/bin/env bash
# `make interop`: sens against the real Linux kernel (QEMU, ../shared/linuxvm), both ways.
set -uo pipefail
SENS=${1:?usage: run_all.sh path/to/sens}
HERE=$(cd "$(dirname "$0")" && pwd)
fails=0 passes=0
for t in "$HERE"/kernel_host.sh "$HERE"/kernel_host_*.sh "$HERE"/host_*.sh; do
  [ -x "$t" ] || continue
  echo "==== $(basename "$t")"
  if "$t" "$SENS"; then passes=$((passes + 1)); else fails=$((fails + 1)); fi
done
# The kernel host once more against cache-aware buffers (issue 12: the interop suite passes
# with --buffers tyche).
echo "==== kernel_host.sh (BUFFERS=tyche)"
if BUFFERS=tyche "$HERE"/kernel_host.sh "$SENS"; then passes=$((passes + 1)); else fails=$((fails + 1)); fi
echo "interop: $passes passed, $fails failed"
[ $fails = 0 ]
