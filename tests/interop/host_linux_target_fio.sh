#!/usr/bin/env bash
# The fio engine (libsens_fio.so, next to the sens binary) against the Linux kernel target
# (nvmet-tcp) in the test VM (tests/interop/vm): fio with --ioengine=external:libsens_fio.so and
# verify=crc32c, 4k random writes (in-capsule), 128k random read/write (through R2T), and
# 4 threads sharing 2 connections (sendlist, then lock).
# Usage: tests/interop/host_linux_target_fio.sh [path/to/sens]   Exit 0 only if every step passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SENS=$(realpath "${1:-$ROOT/build/sens}")
VMDIR=${SENS_VM_DIR:-$HERE/vm}
NQN=nqn.2026-11.dev.sens:linux-target
NAME=host_linux_target_fio
. "$HERE/linux_target_vm.sh"
[ -x "$SENS" ] || { echo "$NAME: no sens binary at $SENS" >&2; exit 2; }
ENGINE=$(dirname "$SENS")/libsens_fio.so
FIO=${FIO:-$(command -v fio)}
[ -f "$ENGINE" ] || { echo "$NAME: no fio engine at $ENGINE (make deps fetches fio's source)" >&2; exit 2; }
[ -x "$FIO" ] || { echo "$NAME: no fio" >&2; exit 2; }
start_linux_target guest_linux_target.sh --env HOLD=400 --env SIZE_MB=256 --env NQN=$NQN

TRID="trtype:tcp traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN"
FIO_COMMON=(--ioengine="external:$ENGINE" --sens_trid="$TRID" --verify=crc32c --do_verify=1
  --verify_fatal=1 --verify_state_save=0 --group_reporting)
check "fio randwrite 4k verify" 0 "err= *0" \
  "$FIO" --name=w4k "${FIO_COMMON[@]}" --rw=randwrite --bs=4k --size=16M --iodepth=16
check "fio randrw 128k verify" 0 "err= *0" \
  "$FIO" --name=rw128k "${FIO_COMMON[@]}" --rw=randrw --bs=128k --size=32M --iodepth=8
for share in sendlist lock; do
  check "fio 4 threads over 2 connections ($share) verify" 0 "err= *0" \
    "$FIO" --name=shared "${FIO_COMMON[@]}" --thread --numjobs=4 --sens_share=$share \
    --sens_connections=2 --rw=randwrite --bs=4k --size=8M --offset_increment=8M --iodepth=16
done
finish
