#!/usr/bin/env bash
# build_times.sh [TARGET] [TOP]: where the compile time goes. Builds TARGET (default: all) from
# scratch in build-times/ with every compile timed (scripts/time_compile.sh as the compiler
# launcher, $(nproc) jobs), then lists the TOP (20) slowest translation units and the total.
# Sorted by CPU time, which a busy machine does not inflate as it does wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:-all}
TOP=${2:-20}
DIR=build-times
rm -rf "$DIR"
./scripts/configure.sh "$DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER_LAUNCHER="$PWD/scripts/time_compile.sh" \
  -DCMAKE_C_COMPILER_LAUNCHER="$PWD/scripts/time_compile.sh" > /dev/null
export SENS_COMPILE_TIMES=$PWD/$DIR/compile-times.tsv SENS_SOURCE_DIR=$PWD
t0=$SECONDS
cmake --build "$DIR" -j "$(nproc)" --target "$TARGET" > "$DIR/build.log" 2>&1 || {
  tail -n 30 "$DIR/build.log"
  exit 1
}
wall=$((SECONDS - t0))
echo "build of '$TARGET' with $(nproc) jobs: ${wall} s wall, load average $(cut -d' ' -f1-3 /proc/loadavg);" \
  "$(wc -l < "$SENS_COMPILE_TIMES") translation units, $(awk '{s += $1} END {printf "%.0f", s}' "$SENS_COMPILE_TIMES") CPU s of compiling"
echo "the $TOP slowest (CPU seconds, wall seconds, file):"
sort -rn "$SENS_COMPILE_TIMES" | head -n "$TOP" |
  sed -E 's#[^\t]*CMakeFiles/([^/]*)\.dir/Unity/[^\t]*#(the unity file of target \1)#' |
  awk -F'\t' '{printf "  %6.1f %6.1f  %s\n", $1, $2, $3}'
