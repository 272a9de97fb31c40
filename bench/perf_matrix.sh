#!/usr/bin/env bash
# The README's `sens perf` benchmark: 4 KiB random reads against `sens target` (RAM
# namespace), 1 and 8 queues x QD 1 and 32, target on core 0, perf on core 1, for each
# coalescing policy (the same on both ends). Prints a markdown table.
# Usage: bench/perf_matrix.sh [build/sens] [seconds]
set -euo pipefail
SENS=${1:-build/sens}
SECS=${2:-5}
echo "| policy | queues x QD | IOPS | MiB/s | avg us | p50 us | p99 us | p99.9 us | perf CPU usr+sys s | perf sends/IO |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for policy in off eager uniform semantic adaptive; do
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  LOG=$(mktemp)
  taskset -c 0 "$SENS" target --listen 127.0.0.1:$PORT --discovery-port 0 --ns ram:1G \
    --coalesce $policy -q > "$LOG" 2>&1 &
  TPID=$!
  for _ in $(seq 100); do grep -q "listening on" "$LOG" && break; sleep 0.05; done
  for q in 1 8; do
    for qd in 1 32; do
      J=$(mktemp)
      taskset -c 1 "$SENS" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$PORT subnqn:nqn.2026-11.io.sens-target:ram0" \
        --rw randread --bs 4k --queues $q --qd $qd --time "$SECS" --warmup 1 --coalesce $policy \
        --json "$J" -q > /dev/null
      python3 - "$J" "$policy" "$q" "$qd" << 'PY'
import json, sys
j = json.load(open(sys.argv[1])); p = j["clat_ns"]["percentile"]
print(f"| {sys.argv[2]} | {sys.argv[3]}x{sys.argv[4]} | {j['iops']:,.0f} | {j['bw_bytes'] / 2**20:,.1f} | "
      f"{j['clat_ns']['mean'] / 1e3:.1f} | {p['50.000000'] / 1e3:.1f} | {p['99.000000'] / 1e3:.1f} | "
      f"{p['99.900000'] / 1e3:.1f} | {j['cpu_user_s']:.2f}+{j['cpu_sys_s']:.2f} | {j['syscalls']['send_per_io']:.3f} |")
PY
      rm -f "$J"
    done
  done
  kill -INT $TPID
  wait $TPID || true
  rm -f "$LOG"
done
