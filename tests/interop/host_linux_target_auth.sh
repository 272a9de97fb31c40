#!/usr/bin/env bash
# sens as the host against the Linux kernel target (nvmet-tcp, linuxvm) with DH-HMAC-CHAP keys
# set in configfs: sens identify and sens perf --verify with SHA-256 / null group, SHA-384 /
# ffdhe2048 with bidirectional authentication, SHA-512 / ffdhe4096; and a wrong key, a wrong
# controller key and no key, which must fail with a reason.
# Usage: tests/interop/host_linux_target_auth.sh [path/to/sens]    Exit 0 only if every step passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SENS=$(realpath "${1:-$ROOT/build/sens}")
LINUXVM=${LINUXVM:-$(realpath "$ROOT/../shared/linuxvm")}
NQN=nqn.2024-01.io.linuxvm:auth
TIME=${TIME:-3}
freeport() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
[ -x "$SENS" ] || { echo "host_linux_target_auth: no sens binary at $SENS" >&2; exit 2; }
"$LINUXVM/build.sh" > /dev/null || { echo "host_linux_target_auth: linuxvm build failed" >&2; exit 2; }

H1=nqn.2014-08.org.nvmexpress:uuid:5e115e11-bbbb-4000-8000-00000000b001
H2=nqn.2014-08.org.nvmexpress:uuid:5e115e11-bbbb-4000-8000-00000000b002
H3=nqn.2014-08.org.nvmexpress:uuid:5e115e11-bbbb-4000-8000-00000000b003
K1=$(nvme gen-dhchap-key --hmac=1 --key-length=32 --nqn=$H1)
K2=$(nvme gen-dhchap-key --hmac=2 --key-length=48 --nqn=$H2)
C2=$(nvme gen-dhchap-key --hmac=0 --key-length=32)
K3=$(nvme gen-dhchap-key --hmac=0 --key-length=64)
BAD=$(nvme gen-dhchap-key --hmac=0 --key-length=32)
HOSTS="$H1,$K1,-,sha256,null $H2,$K2,$C2,sha384,ffdhe2048 $H3,$K3,-,sha512,ffdhe4096"

PORT=$(freeport)
REL=$(freeport)
LOG=$(mktemp /tmp/host_linux_target_auth.XXXXXX.log)
cd "$HERE"
"$LINUXVM/run.sh" guest_linux_target_auth.sh --hostfwd "$PORT:4420" --hostfwd "$REL:5555" \
  --env HOLD=400 --env "HOSTS=$HOSTS" --env NQN=$NQN --log "$LOG" -q &
VM=$!
release() {
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $REL), timeout=5).close()" \
    2> /dev/null || true
  for _ in $(seq 60); do kill -0 "$VM" 2> /dev/null || break; sleep 1; done
  kill "$VM" 2> /dev/null || true
  wait "$VM" 2> /dev/null || true
}
trap release EXIT
for _ in $(seq 240); do
  grep -q TARGET_READY "$LOG" 2> /dev/null && break
  kill -0 "$VM" 2> /dev/null || { echo "host_linux_target_auth: VM exited early; log $LOG" >&2; exit 2; }
  sleep 0.5
done
grep -q TARGET_READY "$LOG" || { echo "host_linux_target_auth: target not ready; log $LOG" >&2; exit 2; }

trid() { echo "trtype:tcp traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN hostnqn:$1"; }
failed=0
OUT=$(mktemp)
step() {  # step NAME EXPECTED-EXIT EXPECTED-REGEX COMMAND...
  local name=$1 want_rc=$2 want=$3
  shift 3
  echo "== $name"
  timeout 300 "$@" > "$OUT" 2>&1
  local rc=$?
  tail -n 12 "$OUT"
  if [ $rc -ne "$want_rc" ]; then
    echo "FAIL $name: exit $rc, expected $want_rc"; failed=1
  elif ! grep -qE "$want" "$OUT"; then
    echo "FAIL $name: output lacks /$want/"; failed=1
  else
    echo "PASS $name"
  fi
}
VERIFIED="verify: [1-9][0-9]* blocks checked, 0 failed"
step "identify sha256/null" 0 "^subnqn +: $NQN" "$SENS" identify -r "$(trid $H1)" --dhchap-secret "$K1"
step "perf sha256/null randrw 4k verify" 0 "$VERIFIED" "$SENS" perf -r "$(trid $H1)" \
  --dhchap-secret "$K1" --rw randrw --bs 4k --qd 8 --queues 2 --time "$TIME" --verify --size 16M
step "perf sha384/ffdhe2048 bidirectional randwrite 128k verify" 0 "$VERIFIED" "$SENS" perf \
  -r "$(trid $H2)" --dhchap-secret "$K2" --dhchap-ctrl-secret "$C2" --rw randwrite --bs 128k \
  --qd 8 --queues 2 --time "$TIME" --verify --size 32M
step "perf sha512/ffdhe4096 randread 16k verify digests" 0 "$VERIFIED" "$SENS" perf \
  -r "$(trid $H3)" --dhchap-secret "$K3" --rw randread --bs 16k --qd 8 --queues 2 --time "$TIME" \
  --verify --size 4M --hdr-digest --data-digest
step "wrong key refused" 1 "FAILURE1|refused" "$SENS" perf -r "$(trid $H1)" --dhchap-secret "$BAD" \
  --time 1 -q
step "wrong controller key refused" 1 "controller's response does not match" "$SENS" perf \
  -r "$(trid $H2)" --dhchap-secret "$K2" --dhchap-ctrl-secret "$BAD" --time 1 -q
step "missing key refused" 1 "requires authentication" "$SENS" perf -r "$(trid $H1)" --time 1 -q
rm -f "$OUT"
if [ $failed -eq 0 ]; then
  echo "host_linux_target_auth: PASS"
  rm -f "$LOG"
else
  echo "host_linux_target_auth: FAIL (VM log $LOG)"
fi
exit $failed
