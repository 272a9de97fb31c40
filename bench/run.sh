#!/usr/bin/env bash
# `make bench`: the paper's experiments on this machine (bench/run.py --help), then naive vs
# tyche buffers at many connections (bench/tyche.py; its table is docs/results.md's "End to
# end" section), TLS against plain TCP (bench/tls.py) and shared connections, lock vs sendlist
# vs none, with IOPS and p99 plots against the thread count (bench/share.py). Arguments go to run.py; with any,
# only run.py runs.
set -euo pipefail
cd "$(dirname "$0")/.."
sens=${1:-build/sens}
python3 bench/run.py --sens "$sens" "${@:2}"
if [ "$#" -le 1 ]; then
  python3 bench/tyche.py --sens "$sens" --rt --reps 5 --size 64M --json bench/out/tyche.json
  # The cost of TLS against plain TCP (docs/results.md, "TLS").
  python3 bench/tls.py --sens "$sens"
  # Shared connections (docs/results.md, "Shared connections"): bench/out/share-{iops,p99}.png.
  mkdir -p bench/out
  python3 bench/share.py --sens "$sens" --json bench/out/share.json --plot bench/out
fi
