#!/usr/bin/env bash
# CMake compiler launcher of scripts/build_times.sh: runs the compile it is given and appends
# "CPU seconds<TAB>wall seconds<TAB>source file" to $SENS_COMPILE_TIMES. CPU time (the
# compiler's user + system time) is what a file costs whatever else the machine is doing.
start=$EPOCHREALTIME
"$@"
rc=$?
end=$EPOCHREALTIME
src=
for a in "$@"; do case "$a" in *.cc | *.c | *.cxx) src=$a ;; esac; done
# `times` prints the shell's own, then its children's user and system time (0m1.234s 0m0.056s);
# it runs in this shell (a pipe or $(...) would fork a child that has no children yet).
tms=$(mktemp)
times > "$tms"
cpu=$(awk 'NR == 2 { split($0, t, /[ms ]+/); print t[1] * 60 + t[2] + t[3] * 60 + t[4] }' "$tms")
rm -f "$tms"
awk -v c="$cpu" -v s="$start" -v e="$end" -v f="${src#"$SENS_SOURCE_DIR"/}" \
  'BEGIN { printf "%.2f\t%.2f\t%s\n", c, e - s, f }' >> "${SENS_COMPILE_TIMES:-/dev/null}"
exit $rc
