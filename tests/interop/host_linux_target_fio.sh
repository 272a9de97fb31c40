#!/usr/bin/env bash
# The fio engine (libsens_fio.so, next to the sens binary) against the Linux kernel target
# (nvmet-tcp) in the linuxvm harness: fio with --ioengine=external:libsens_fio.so and
# verify=crc32c, 4k random writes (in-capsule), 128k random read/write (through R2T), and
# 4 threads sharing 2 connections (sendlist, then lock).
# Usage: tests/interop/host_linux_target_fio.sh [path/to/sens]   Exit 0 only if every step passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SENS=$(realpath "${1:-$ROOT/build/sens}")
LINUXVM=${LINUXVM:-$(realpath "$ROOT/../shared/linuxvm")}
NQN=nqn.2024-01.io.linuxvm:export
TIME=${TIME:-3}

freeport() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
[ -x "$SENS" ] || { echo "host_linux_target_fio: no sens binary at $SENS" >&2; exit 2; }
ENGINE=$(dirname "$SENS")/libsens_fio.so
FIO=${FIO:-$(command -v fio)}
[ -f "$ENGINE" ] || { echo "host_linux_target_fio: no fio engine at $ENGINE (make deps fetches fio's source)" >&2; exit 2; }
[ -x "$FIO" ] || { echo "host_linux_target_fio: no fio" >&2; exit 2; }
"$LINUXVM/build.sh" > /dev/null || { echo "host_linux_target_fio: linuxvm build failed" >&2; exit 2; }

PORT=$(freeport)
REL=$(freeport)
LOG=$(mktemp /tmp/host_linux_target_fio.XXXXXX.log)
"$LINUXVM/run.sh" "$LINUXVM/tests/target_export.sh" --hostfwd "$PORT:4420" --hostfwd "$REL:5555" \
  --env HOLD=400 --env SIZE_MB=256 --log "$LOG" -q &
VM=$!
release() {
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $REL), timeout=5).close()" \
    2> /dev/null || true
  # The guest powers off on release; do not wait forever if it does not.
  for _ in $(seq 60); do kill -0 "$VM" 2> /dev/null || break; sleep 1; done
  kill "$VM" 2> /dev/null || true
  wait "$VM" 2> /dev/null || true
}
trap release EXIT

for _ in $(seq 240); do
  grep -q TARGET_READY "$LOG" 2> /dev/null && break
  kill -0 "$VM" 2> /dev/null || { echo "host_linux_target_fio: VM exited early; log $LOG" >&2; exit 2; }
  sleep 0.5
done
grep -q TARGET_READY "$LOG" || { echo "host_linux_target_fio: target not ready; log $LOG" >&2; exit 2; }

TRID="trtype:tcp traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN"
failed=0
OUT=$(mktemp)
step() {  # step NAME EXPECTED-REGEX COMMAND... : runs it, checks exit 0 and the output
  local name=$1 want=$2
  shift 2
  echo "== $name: $*"
  timeout 300 "$@" > "$OUT" 2>&1
  local rc=$?
  cat "$OUT"
  if [ $rc -ne 0 ]; then
    echo "FAIL $name: exit $rc"
    failed=1
  elif grep -q "verify: bad" "$OUT"; then
    echo "FAIL $name: fio reports a verify failure"
    failed=1
  elif ! grep -qE "$want" "$OUT"; then
    echo "FAIL $name: output lacks /$want/"
    failed=1
  else
    echo "PASS $name"
  fi
}

FIO_COMMON=(--ioengine="external:$ENGINE" --sens_trid="$TRID" --verify=crc32c --do_verify=1
  --verify_fatal=1 --verify_state_save=0 --group_reporting)
step "fio randwrite 4k verify" "err= *0" \
  "$FIO" --name=w4k "${FIO_COMMON[@]}" --rw=randwrite --bs=4k --size=16M --iodepth=16
step "fio randrw 128k verify" "err= *0" \
  "$FIO" --name=rw128k "${FIO_COMMON[@]}" --rw=randrw --bs=128k --size=32M --iodepth=8
for share in sendlist lock; do
  step "fio 4 threads over 2 connections ($share) verify" "err= *0" \
    "$FIO" --name=shared "${FIO_COMMON[@]}" --thread --numjobs=4 --sens_share=$share \
    --sens_connections=2 --rw=randwrite --bs=4k --size=8M --offset_increment=8M --iodepth=16
done
rm -f "$OUT"
if [ $failed -eq 0 ]; then
  echo "host_linux_target_fio: PASS"
  rm -f "$LOG"
else
  echo "host_linux_target_fio: FAIL (VM log $LOG)"
fi
exit $failed
