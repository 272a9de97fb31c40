#!/usr/bin/env bash
# The Linux kernel's NVMe/TCP host (in QEMU, tests/interop/vm) against `sens target`:
# nvme discover, nvme connect with and without digests, fio verify for 4 KiB randrw
# (in-capsule writes) and 128 KiB randwrite (R2T writes), flush, disconnect, and a host that
# the allowed-hosts list refuses; then no unexpected I/O errors in the kernel's log.
# Usage: kernel_host.sh path/to/sens   (INTEROP_LOGS=DIR keeps the VM and target logs there;
# BUFFERS=tyche runs the target with cache-aware buffers.)
set -euo pipefail
SENS=$(realpath "${1:?usage: kernel_host.sh path/to/sens}")
HERE=$(cd "$(dirname "$0")" && pwd)
VMDIR=${SENS_VM_DIR:-$HERE/vm} # the Linux VM: build.sh makes (or checks) it, run.py boots it
"$VMDIR/build.sh" || { echo "kernel_host: the test VM cannot be built (see above)" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'kill $TPID 2> /dev/null || true; wait 2> /dev/null || true; rm -rf "$WORK"' EXIT
NQN=nqn.2026-11.dev.sens:interop
DENY=nqn.2026-11.dev.sens:restricted
# Random ports; a port someone else holds makes the target refuse to start: try others.
for attempt in 1 2 3 4 5; do
  PORT=$((20000 + RANDOM % 20000))
  DPORT=$((PORT + 1))
  cat > "$WORK/target.json" << EOF2
{
  "listen": ["127.0.0.1:$PORT"],
  "discovery_port": $DPORT,
  "buffers": "${BUFFERS:-naive}",
  "subsystems": [
    {"nqn": "$NQN", "namespaces": ["ram:256M"]},
    {"nqn": "$DENY", "namespaces": ["null:64M"],
     "allowed_hosts": ["nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-000000000001"]}
  ]
}
EOF2
  "$SENS" target --config "$WORK/target.json" --stats-json "$WORK/stats.json" > "$WORK/target.log" 2>&1 &
  TPID=$!
  for _ in $(seq 50); do
    grep -q "listening on" "$WORK/target.log" && break
    kill -0 $TPID 2> /dev/null || break
    sleep 0.1
  done
  grep -q "listening on" "$WORK/target.log" && break
  wait $TPID 2> /dev/null || true
  TPID=
  grep -q "cannot listen" "$WORK/target.log" || break
done
grep -q "listening on" "$WORK/target.log" || { cat "$WORK/target.log"; exit 1; }

cd "$HERE"
rc=0
"$VMDIR/run.py" guest_kernel_host.sh -q --timeout 400 --guestfwd 4420:$PORT --guestfwd 8009:$DPORT \
  --file guest_common.sh --env NQN=$NQN --env DENY_NQN=$DENY --log "$WORK/vm.log" > /dev/null || rc=$?
grep -E '@@NOTE (STEP|FAILURES)|^\[[ 0-9.]*\] +dmesg: ' "$WORK/vm.log" | sed 's/^\[[ 0-9.]*\] //'
kill -INT $TPID
wait $TPID || { echo "target exited with $?"; rc=1; }
TPID=
if [ $rc != 0 ]; then
  echo "---- VM log (tail)"; tail -n 60 "$WORK/vm.log"
  echo "---- target log"; tail -n 30 "$WORK/target.log"
fi
python3 -c "import json,sys; j=json.load(open('$WORK/stats.json')); print('target stats: pdus_sent', j['pdus_sent'], 'send_calls', j['send_calls'])"
[ -z "${INTEROP_LOGS:-}" ] || { mkdir -p "$INTEROP_LOGS"; cp "$WORK"/*.log "$INTEROP_LOGS"/; }
echo "kernel_host: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
