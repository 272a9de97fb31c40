#!/usr/bin/env bash
# `make demo`: a target on a built-in RAM namespace and a short benchmark against it.
# The target runs on core 0 and the load generator on core 1 when there are two cores.
set -euo pipefail
SENS=${1:-build/sens}
PORT=${PORT:-4420}
NQN=nqn.2026-11.io.sens-target:ram0
TIME=${TIME:-5}
LOG=$(mktemp)
STATS=$(mktemp --suffix=.json)
pin_target=() pin_perf=()
if [ "$(nproc)" -ge 2 ] && command -v taskset > /dev/null; then
  pin_target=(taskset -c 0) pin_perf=(taskset -c 1)
fi

"${pin_target[@]}" "$SENS" target --listen 127.0.0.1:$PORT --discovery-port 0 --ns ram:1G \
  --stats-json "$STATS" > "$LOG" 2>&1 &
TPID=$!
trap 'kill $TPID 2> /dev/null || true; rm -f "$LOG" "$STATS"' EXIT
for _ in $(seq 100); do grep -q "listening on" "$LOG" && break; sleep 0.05; done
if ! grep -q "listening on" "$LOG"; then
  cat "$LOG"
  echo "demo: the target did not start (is port $PORT busy? PORT=NNNN make demo)" >&2
  exit 1
fi
echo "== sens target (RAM namespace, semantic coalescing) =="
sed 's/^/  /' "$LOG"
TRID="trtype:tcp traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN"

echo
echo "== sens perf: 4 KiB random reads, 4 queues x QD 32, ${TIME}s =="
"${pin_perf[@]}" "$SENS" perf -r "$TRID" --rw randread --bs 4k --qd 32 --queues 4 --time "$TIME"

echo
echo "== sens perf: 16 KiB random writes through R2T (in-capsule is 8 KiB), verified =="
"${pin_perf[@]}" "$SENS" perf -r "$TRID" --rw randrw --rwmixread 50 --bs 16k --qd 16 --queues 2 \
  --time 3 --verify

kill -INT $TPID
wait $TPID
TPID=
echo
echo "== target coalescing counters ($STATS) =="
python3 - "$STATS" << 'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"  policy {j['policy']}: {j['pdus_sent']} PDUs in {j['send_calls']} send calls "
      f"({j['pdus_sent'] / max(j['send_calls'], 1):.1f} PDUs per sendmsg)")
print("  flushes by reason:", ", ".join(f"{k} {v}" for k, v in j['flushes'].items() if v))
r = j['r2t_delay_us']
print(f"  R2T queueing delay: mean {r['mean']:.1f} us, p99 {r['p99']:.1f} us over {r['count']} R2Ts")
PY
