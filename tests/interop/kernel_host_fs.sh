#!/usr/bin/env bash
# The Linux kernel's NVMe/TCP host (in QEMU, tests/interop/vm) against `sens target`, one
# VM boot (guest_kernel_host_fs.sh): ext4 on a RAM namespace (mkfs with discard, files,
# fsck, remount and checksums, online discard, blkdiscard); fio at iodepth 32 x 4 jobs over
# 2 and 4 I/O queues, verified; and a target killed (SIGKILL) and restarted on the same
# port under a connected host, with a file namespace whose data must survive, then the
# kernel's log checked for I/O errors.  Usage: kernel_host_fs.sh path/to/sens
# (INTEROP_LOGS=DIR keeps the VM and target logs there.)
set -euo pipefail
SENS=$(realpath "${1:?usage: kernel_host_fs.sh path/to/sens}")
HERE=$(cd "$(dirname "$0")" && pwd)
VMDIR=${SENS_VM_DIR:-$HERE/vm} # the Linux VM: build.sh makes (or checks) it, run.py boots it
"$VMDIR/build.sh" || { echo "kernel_host_fs: the test VM cannot be built (see above)" >&2; exit 2; }

WORK=$(mktemp -d)
TPID= VM=
cleanup() {
  [ -z "$VM" ] || kill "$VM" 2> /dev/null || true
  [ -z "$TPID" ] || kill "$TPID" 2> /dev/null || true
  wait 2> /dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
NQN=nqn.2026-11.dev.sens:interop-fs
FILE_NQN=nqn.2026-11.dev.sens:interop-file
mkdir "$WORK/share"             # the guest's /host: the host says there when it restarted
truncate -s 128M "$WORK/ns.img" # the file namespace; its data outlives the target

start_target() {  # start_target LOG: the target on $PORT; 1 if it does not listen
  "$SENS" target --config "$WORK/target.json" --stats-json "$WORK/stats.json" > "$1" 2>&1 &
  TPID=$!
  for _ in $(seq 50); do
    grep -q "listening on" "$1" && return 0
    kill -0 $TPID 2> /dev/null || break
    sleep 0.1
  done
  grep -q "listening on" "$1" && return 0
  kill $TPID 2> /dev/null || true
  wait $TPID 2> /dev/null || true
  TPID=
  return 1
}
# Random ports; a port someone else holds makes the target refuse to start: try others.
for attempt in 1 2 3 4 5; do
  PORT=$((20000 + RANDOM % 20000))
  cat > "$WORK/target.json" << EOF2
{
  "listen": ["127.0.0.1:$PORT"],
  "discovery_port": 0,
  "subsystems": [
    {"nqn": "$NQN", "namespaces": ["ram:256M"]},
    {"nqn": "$FILE_NQN", "namespaces": ["file:$WORK/ns.img"]}
  ]
}
EOF2
  start_target "$WORK/target.log" && break
  grep -q "cannot listen" "$WORK/target.log" || break
done
[ -n "$TPID" ] || { cat "$WORK/target.log"; exit 1; }

cd "$HERE"
"$VMDIR/run.py" guest_kernel_host_fs.sh -q --timeout 500 --guestfwd 4420:$PORT \
  --file guest_common.sh --share "$WORK/share" --env NQN=$NQN --env FILE_NQN=$FILE_NQN \
  --log "$WORK/vm.log" > /dev/null &
VM=$!
# The guest says when its pattern is written: kill the target then, and start it again on
# the same port with the same config.
restarted=0
while kill -0 $VM 2> /dev/null; do
  if grep -q '@@NOTE RESTART-TARGET' "$WORK/vm.log" 2> /dev/null; then
    kill -KILL $TPID || true
    wait $TPID 2> /dev/null || true
    TPID=
    if start_target "$WORK/target2.log"; then
      echo "target killed (SIGKILL) and restarted on port $PORT as pid $TPID"
      echo $TPID > "$WORK/share/restarted"
      restarted=1
    else
      echo "target did not restart:"; cat "$WORK/target2.log"
      touch "$WORK/share/restart-failed"
    fi
    break
  fi
  sleep 0.2
done
rc=0
wait $VM || rc=$?
VM=
grep -E '@@NOTE (STEP|FAILURES)|^\[[ 0-9.]*\] +dmesg: ' "$WORK/vm.log" | sed 's/^\[[ 0-9.]*\] //'
[ $restarted = 1 ] || { echo "the target was not restarted"; rc=1; }
if [ -n "$TPID" ]; then
  kill -INT $TPID
  wait $TPID || { echo "target exited with $?"; rc=1; }
  TPID=
fi
if [ $rc != 0 ]; then
  echo "---- VM log (tail)"; tail -n 80 "$WORK/vm.log"
  echo "---- target log"; tail -n 30 "$WORK/target.log"
  [ ! -f "$WORK/target2.log" ] || { echo "---- restarted target log"; tail -n 30 "$WORK/target2.log"; }
fi
[ ! -f "$WORK/stats.json" ] ||
  python3 -c "import json,sys; j=json.load(open('$WORK/stats.json')); print('restarted target stats: pdus_sent', j['pdus_sent'], 'send_calls', j['send_calls'])"
[ -z "${INTEROP_LOGS:-}" ] || { mkdir -p "$INTEROP_LOGS"; cp "$WORK"/*.log "$INTEROP_LOGS"/; }
echo "kernel_host_fs: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
