#!/usr/bin/env bash
# `make bench`: the paper's experiments on this machine (bench/run.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 bench/run.py --sens "${1:-build/sens}" "${@:2}"
