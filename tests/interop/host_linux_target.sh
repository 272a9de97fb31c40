#!/usr/bin/env bash
# sens as the host against the Linux kernel target (nvmet-tcp) in the linuxvm harness:
# sens discover, sens identify and sens perf --verify (randrw 4k, randwrite 128k through R2T,
# and one run with header and data digests), each over 2 I/O queues at qd 8.
# Usage: tests/interop/host_linux_target.sh [path/to/sens]    Exit 0 only if every step passed.
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
[ -x "$SENS" ] || { echo "host_linux_target: no sens binary at $SENS" >&2; exit 2; }
"$LINUXVM/build.sh" > /dev/null || { echo "host_linux_target: linuxvm build failed" >&2; exit 2; }

PORT=$(freeport)
REL=$(freeport)
LOG=$(mktemp /tmp/host_linux_target.XXXXXX.log)
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
  kill -0 "$VM" 2> /dev/null || { echo "host_linux_target: VM exited early; log $LOG" >&2; exit 2; }
  sleep 0.5
done
grep -q TARGET_READY "$LOG" || { echo "host_linux_target: target not ready; log $LOG" >&2; exit 2; }

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
  elif ! grep -qE "$want" "$OUT"; then
    echo "FAIL $name: output lacks /$want/"
    failed=1
  else
    echo "PASS $name"
  fi
}

# Linux serves discovery on the I/O port.
step discover "subnqn: +$NQN" "$SENS" discover -a 127.0.0.1 -s "$PORT"
step identify "^subnqn +: $NQN" "$SENS" identify -r "$TRID" --ns
step "perf randrw 4k verify" "verify: [1-9][0-9]* blocks checked, 0 failed" \
  "$SENS" perf -r "$TRID" --rw randrw --bs 4k --qd 8 --queues 2 --time "$TIME" --verify --size 16M
step "perf randwrite 128k verify" "verify: [1-9][0-9]* blocks checked, 0 failed" \
  "$SENS" perf -r "$TRID" --rw randwrite --bs 128k --qd 8 --queues 2 --time "$TIME" --verify --size 32M
step "perf randread 16k verify digests" "verify: [1-9][0-9]* blocks checked, 0 failed" \
  "$SENS" perf -r "$TRID" --rw randread --bs 16k --qd 8 --queues 2 --time "$TIME" --verify --size 4M \
  --hdr-digest --data-digest
rm -f "$OUT"
if [ $failed -eq 0 ]; then
  echo "host_linux_target: PASS"
  rm -f "$LOG"
else
  echo "host_linux_target: FAIL (VM log $LOG)"
fi
exit $failed
