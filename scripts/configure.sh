#!/usr/bin/env bash
# configure.sh DIR [CMAKE-ARGS...]: configures the build tree DIR with Ninja (quietly; the log is
# DIR/configure.log, printed if cmake fails). A tree configured with another generator (an
# older checkout used Makefiles) is reset first, as cmake refuses to switch generators.
set -euo pipefail
dir=${1:?usage: configure.sh DIR [CMAKE-ARGS...]}
shift
cd "$(dirname "$0")/.."
if [ -f "$dir/CMakeCache.txt" ] && ! grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$dir/CMakeCache.txt"; then
  echo "[build] $dir was configured with another generator: configuring it again for Ninja"
  rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
fi
mkdir -p "$dir"
cmake -S . -B "$dir" -G Ninja "$@" > "$dir/configure.log" 2>&1 || {
  cat "$dir/configure.log"
  exit 1
}
