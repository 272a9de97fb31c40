#!/usr/bin/env bash
# sens as the host against the Linux kernel target (nvmet-tcp) in the test VM (tests/interop/vm):
# sens discover, sens identify and sens perf --verify (randrw 4k, randwrite 128k through R2T,
# and one run with header and data digests), each over 2 I/O queues at qd 8.
# Usage: tests/interop/host_linux_target.sh [path/to/sens]    Exit 0 only if every step passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SENS=$(realpath "${1:-$ROOT/build/sens}")
VMDIR=${SENS_VM_DIR:-$HERE/vm}
NAME=host_linux_target
NQN=nqn.2026-11.dev.sens:linux-target
TIME=${TIME:-3}
. "$HERE/linux_target_vm.sh"
[ -x "$SENS" ] || { echo "$NAME: no sens binary at $SENS" >&2; exit 2; }
start_linux_target guest_linux_target.sh --env HOLD=400 --env SIZE_MB=256 --env NQN=$NQN

TRID="trtype:tcp traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN"
VERIFIED="verify: [1-9][0-9]* blocks checked, 0 failed"
# Linux serves discovery on the I/O port.
check discover 0 "subnqn: +$NQN" "$SENS" discover -a 127.0.0.1 -s "$PORT"
check identify 0 "^subnqn +: $NQN" "$SENS" identify -r "$TRID" --ns
check "perf randrw 4k verify" 0 "$VERIFIED" \
  "$SENS" perf -r "$TRID" --rw randrw --bs 4k --qd 8 --queues 2 --time "$TIME" --verify --size 16M
check "perf randwrite 128k verify" 0 "$VERIFIED" \
  "$SENS" perf -r "$TRID" --rw randwrite --bs 128k --qd 8 --queues 2 --time "$TIME" --verify --size 32M
check "perf randread 16k verify digests" 0 "$VERIFIED" \
  "$SENS" perf -r "$TRID" --rw randread --bs 16k --qd 8 --queues 2 --time "$TIME" --verify --size 4M \
  --hdr-digest --data-digest
finish
