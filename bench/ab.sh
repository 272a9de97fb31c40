#!/usr/bin/env bash
# A/B: two `sens` binaries (e.g. main before and after a change) on the same workloads,
# alternating runs so that the machine's drift hits both alike. Target on core 0, perf on
# core 1, a fresh RAM target per run. Prints every run and the medians (IOPS).
# Usage: bench/ab.sh OLD_SENS NEW_SENS [REPS] [SECONDS]  (AB_WORKLOAD=... picks one workload)
set -euo pipefail
OLD=${1:?usage: ab.sh OLD_SENS NEW_SENS [REPS] [SECONDS]}
NEW=${2:?usage: ab.sh OLD_SENS NEW_SENS [REPS] [SECONDS]}
REPS=${3:-5}
SECS=${4:-4}
WORK=$(mktemp -d)
trap 'kill $TPID 2> /dev/null || true; rm -rf "$WORK"' EXIT
TPID=
WORKLOADS=("--rw randread --bs 4k --qd 1" "--rw randread --bs 4k --qd 32"
           "--rw randread --bs 4k --qd 32 --queues 4" "--rw randwrite --bs 4k --qd 32"
           "--rw randwrite --bs 16k --qd 32")
# AB_WORKLOAD="--rw randwrite --bs 4k --qd 32": that one workload only.
if [ -n "${AB_WORKLOAD:-}" ]; then WORKLOADS=("$AB_WORKLOAD"); fi

run() {  # BIN WORKLOAD... -> IOPS
  local bin=$1
  shift
  local port
  rm -f "$WORK/p.json"
  for _ in 1 2 3 4 5; do  # a port someone holds: try another
    port=$((30000 + RANDOM % 20000))
    taskset -c 0 "$bin" target --listen 127.0.0.1:$port --discovery-port 0 --ns ram:1G -q \
      > "$WORK/t.log" 2>&1 &
    TPID=$!
    for _ in $(seq 50); do
      grep -q "listening on" "$WORK/t.log" && break
      kill -0 $TPID 2> /dev/null || break
      sleep 0.1
    done
    grep -q "listening on" "$WORK/t.log" && break
    wait $TPID 2> /dev/null || true
  done
  local nqn
  nqn=$(awk '/^subsystem/ {print $2; exit}' "$WORK/t.log")
  taskset -c 1 "$bin" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$nqn" \
    --time "$SECS" --warmup 1 -q --json "$WORK/p.json" "$@" > /dev/null 2>&1 || true
  kill -INT $TPID
  wait $TPID 2> /dev/null || true
  TPID=
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(int(j['iops']) if not j.get('errors') else -1)" "$WORK/p.json" 2> /dev/null || echo -1
}

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

for wl in "${WORKLOADS[@]}"; do
  olds="" news=""
  for rep in $(seq "$REPS"); do
    # shellcheck disable=SC2086
    o=$(run "$OLD" $wl)
    # shellcheck disable=SC2086
    n=$(run "$NEW" $wl)
    olds="$olds $o" news="$news $n"
  done
  mo=$(echo "$olds" | median)
  mn=$(echo "$news" | median)
  printf '%-45s old %8s  new %8s  new/old %s   (old:%s | new:%s)\n' "$wl" "$mo" "$mn" \
    "$(python3 -c "print(round($mn/$mo, 2) if $mo > 0 else 'n/a')")" "$olds" "$news"
done
