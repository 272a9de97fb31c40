#!/usr/bin/env bash
# Multipath over two sens gateways (issue 14): two `sens target` processes on two ports serve
# one subsystem and the same file namespace (same uuid=, so the same NSID/NGUID/UUID); A is
# ANA optimized, B non-optimized. The Linux host (QEMU, tests/interop/vm) connects to both,
# must see two paths with those states and one multipath device, and runs fio verify on it
# while this script kills gateway A mid-run and restarts it: 0 fio errors, the host logs the
# path change, and the path comes back live.
# Usage: kernel_host_multipath.sh path/to/sens   (INTEROP_LOGS=DIR keeps the logs.)
set -euo pipefail
SENS=$(realpath "${1:?usage: kernel_host_multipath.sh path/to/sens}")
HERE=$(cd "$(dirname "$0")" && pwd)
VMDIR=${SENS_VM_DIR:-$HERE/vm} # the Linux VM: build.sh makes (or checks) it, run.py boots it
"$VMDIR/build.sh" || { echo "kernel_host_multipath: the test VM cannot be built (see above)" >&2; exit 2; }

WORK=$(mktemp -d)
APID= BPID= VPID=
trap 'kill $APID $BPID $VPID 2> /dev/null || true; wait 2> /dev/null || true; rm -rf "$WORK"' EXIT
NQN=nqn.2026-11.dev.sens:multipath
UUID=6d756c74-6970-4174-9800-000000000014
truncate -s 256M "$WORK/shared.img"

# start NAME PORT ANA: a gateway; returns 1 if the port was taken. Each gateway hands out its
# own cntlids (a: 1-1000, b: 1001-2000): the host needs them unique within the subsystem.
start() {
  local first=1
  [ "$1" = b ] && first=1001
  cat > "$WORK/$1.json" << EOF2
{
  "listen": ["127.0.0.1:$2,ana=$3"],
  "discovery_port": 0,
  "cntlid_min": $first, "cntlid_max": $((first + 999)),
  "subsystems": [{"nqn": "$NQN", "namespaces": ["file:$WORK/shared.img,uuid=$UUID"]}]
}
EOF2
  "$SENS" target --config "$WORK/$1.json" >> "$WORK/$1.log" 2>&1 &
  local pid=$!
  for _ in $(seq 50); do
    [ "$(grep -c 'listening on' "$WORK/$1.log")" -ge "${4:-1}" ] && break
    kill -0 $pid 2> /dev/null || break
    sleep 0.1
  done
  eval "${1^^}PID=$pid"
  [ "$(grep -c 'listening on' "$WORK/$1.log")" -ge "${4:-1}" ]
}
for attempt in 1 2 3 4 5; do
  PA=$((20000 + RANDOM % 20000))
  PB=$((PA + 1))
  if start a $PA optimized && start b $PB non-optimized; then break; fi
  kill $APID $BPID 2> /dev/null || true
  wait 2> /dev/null || true
  : > "$WORK/a.log"
  : > "$WORK/b.log"
done
grep -q "listening on" "$WORK/b.log" || { cat "$WORK"/*.log; exit 1; }

cd "$HERE"
rc=0
"$VMDIR/run.py" guest_kernel_host_multipath.sh -q --timeout 500 --guestfwd 4420:$PA \
  --guestfwd 4421:$PB --file guest_common.sh --env NQN=$NQN --env RUNTIME=45 \
  --log "$WORK/vm.log" > /dev/null &
VPID=$!
# Gateway A dies 10 s into fio and comes back 15 s later.
for _ in $(seq 3000); do
  grep -q "FIO_START" "$WORK/vm.log" 2> /dev/null && break
  kill -0 $VPID 2> /dev/null || break
  sleep 0.1
done
if grep -q "FIO_START" "$WORK/vm.log"; then
  sleep 10
  echo "killing gateway A (pid $APID) mid-run"
  kill -KILL $APID
  wait $APID 2> /dev/null || true
  sleep 15
  echo "restarting gateway A"
  start a $PA optimized 2 || { echo "gateway A did not restart"; rc=1; }
else
  echo "kernel_host_multipath: the guest never started fio (so gateway A was never killed)"
fi
wait $VPID || rc=$?
VPID=
grep -E '@@NOTE ' "$WORK/vm.log" | sed 's/^\[[ 0-9.]*\] //'
kill -INT $APID $BPID 2> /dev/null || true
wait $APID $BPID 2> /dev/null || true
APID= BPID=
if [ $rc != 0 ]; then
  echo "---- VM log (tail)"; tail -n 60 "$WORK/vm.log"
  echo "---- gateway logs"; tail -n 20 "$WORK/a.log" "$WORK/b.log"
fi
[ -z "${INTEROP_LOGS:-}" ] || { mkdir -p "$INTEROP_LOGS"; cp "$WORK"/*.log "$INTEROP_LOGS"/; }
echo "kernel_host_multipath: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
