#!/usr/bin/env bash
# A/B: two `sens` binaries (e.g. main before and after a change) on the same workloads,
# alternating runs so that the machine's drift hits both alike. Target on core 0, perf on
# core 1, a fresh RAM target per run, its first 256 MiB written before the measured run (reads
# then come from memory, not from the kernel's zero page). A workload that starts with "tls:"
# runs over TLS 1.3 (TLS_AES_128_GCM_SHA256 PSK); digests are perf options. Prints every run
# (IOPS@core round trip ns, from sens_limit beside NEW_SENS) and the medians (IOPS).
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
           "--rw randwrite --bs 16k --qd 32"
           "--rw randread --bs 4k --qd 32 --hdr-digest --data-digest"
           "tls:--rw randread --bs 4k --qd 32" "tls:--rw randwrite --bs 16k --qd 8")
KEY="$WORK/tls.key"
python3 -c "import sys; sys.path.insert(0, sys.argv[1]); from common import nvme_tls_key
print(nvme_tls_key(1))" "$(dirname "$0")" > "$KEY"
# AB_WORKLOAD="--rw randwrite --bs 4k --qd 32": that one workload only.
if [ -n "${AB_WORKLOAD:-}" ]; then WORKLOADS=("$AB_WORKLOAD"); fi

run() {  # BIN [tls:]WORKLOAD... -> IOPS
  local bin=$1
  shift
  local tls=()
  if [[ $1 == tls:* ]]; then
    set -- "${1#tls:}" "${@:2}"
    tls=(--tls "$KEY")
  fi
  local port
  rm -f "$WORK/p.json"
  for _ in 1 2 3 4 5; do  # a port someone holds: try another
    port=$((30000 + RANDOM % 20000))
    taskset -c 0 "$bin" target --listen 127.0.0.1:$port --tls-listen 127.0.0.1:$((port + 1)) \
      --tls "$KEY" --discovery-port 0 --ns ram:1G --rpc none -q > "$WORK/t.log" 2>&1 &
    TPID=$!
    for _ in $(seq 50); do
      [ "$(grep -c "listening on" "$WORK/t.log")" -ge 2 ] && break
      kill -0 $TPID 2> /dev/null || break
      sleep 0.1
    done
    [ "$(grep -c "listening on" "$WORK/t.log")" -ge 2 ] && kill -0 $TPID 2> /dev/null && break
    kill $TPID 2> /dev/null || true
    wait $TPID 2> /dev/null || true
  done
  local nqn
  nqn=$(awk '/^subsystem/ {print $2; exit}' "$WORK/t.log")
  taskset -c 1 "$bin" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$nqn" \
    --rw write --bs 128k --qd 8 --size 256M --prefill --time 0.2 -q > /dev/null 2>&1 || true
  local at=$port
  if [ ${#tls[@]} -gt 0 ]; then at=$((port + 1)); fi
  taskset -c 1 "$bin" perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$at subnqn:$nqn" \
    --size 256M --time "$SECS" --warmup 1 -q --json "$WORK/p.json" "${tls[@]}" "$@" \
    > /dev/null 2>&1 || true
  kill -INT $TPID
  wait $TPID 2> /dev/null || true
  TPID=
  python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(int(j['iops']) if not j.get('errors') else -1)" "$WORK/p.json" 2> /dev/null || echo -1
}

median() { tr ' ' '\n' | grep -v '^$' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# How far apart cores 0 and 1 are before a run (ns; the machine's speed flips about 2x with
# the vCPUs' placement, see README): printed after each run's IOPS as IOPS@NS.
LIMIT="$(dirname "$NEW")/sens_limit"
round_trip() {
  if [ -x "$LIMIT" ]; then
    "$LIMIT" --core-round-trip --json - -q 2> /dev/null |
      python3 -c "import json,sys; print(round(json.load(sys.stdin)['core_round_trip_ns']))" ||
      echo "?"
  else
    echo "?"
  fi
}

for wl in "${WORKLOADS[@]}"; do
  olds="" news=""
  for _ in $(seq "$REPS"); do
    rt=$(round_trip)
    # shellcheck disable=SC2086
    o=$(run "$OLD" $wl)
    olds="$olds $o@$rt"
    rt=$(round_trip)
    # shellcheck disable=SC2086
    n=$(run "$NEW" $wl)
    news="$news $n@$rt"
  done
  mo=$(echo "$olds" | sed 's/@[^ ]*//g' | median)
  mn=$(echo "$news" | sed 's/@[^ ]*//g' | median)
  printf '%-45s old %8s  new %8s  new/old %s   (old:%s | new:%s)\n' "$wl" "$mo" "$mn" \
    "$(python3 -c "print(round($mn/$mo, 2) if $mo > 0 else 'n/a')")" "$olds" "$news"
done
