#!/usr/bin/env bash
# sens as the host against the Linux kernel target (nvmet-tcp, in the test VM) with DH-HMAC-CHAP
# keys set in configfs: sens identify and sens perf --verify with SHA-256 / null group, SHA-384 /
# ffdhe2048 with bidirectional authentication, SHA-512 / ffdhe4096; and a wrong key, a wrong
# controller key and no key, which must fail with a reason.
# Usage: tests/interop/host_linux_target_auth.sh [path/to/sens]    Exit 0 only if every step passed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SENS=$(realpath "${1:-$ROOT/build/sens}")
VMDIR=${SENS_VM_DIR:-$HERE/vm}
NQN=nqn.2026-11.dev.sens:linux-target-auth
TIME=${TIME:-3}
NAME=host_linux_target_auth
. "$HERE/linux_target_vm.sh"
[ -x "$SENS" ] || { echo "$NAME: no sens binary at $SENS" >&2; exit 2; }

H1=nqn.2014-08.org.nvmexpress:uuid:5e115e11-bbbb-4000-8000-00000000b001
H2=nqn.2014-08.org.nvmexpress:uuid:5e115e11-bbbb-4000-8000-00000000b002
H3=nqn.2014-08.org.nvmexpress:uuid:5e115e11-bbbb-4000-8000-00000000b003
K1=$(nvme gen-dhchap-key --hmac=1 --key-length=32 --nqn=$H1)
K2=$(nvme gen-dhchap-key --hmac=2 --key-length=48 --nqn=$H2)
C2=$(nvme gen-dhchap-key --hmac=0 --key-length=32)
K3=$(nvme gen-dhchap-key --hmac=0 --key-length=64)
BAD=$(nvme gen-dhchap-key --hmac=0 --key-length=32)
HOSTS="$H1,$K1,-,sha256,null $H2,$K2,$C2,sha384,ffdhe2048 $H3,$K3,-,sha512,ffdhe4096"

start_linux_target guest_linux_target_auth.sh --env HOLD=400 --env "HOSTS=$HOSTS" --env NQN=$NQN

trid() { echo "trtype:tcp traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN hostnqn:$1"; }
CHECK_TAIL=12
VERIFIED="verify: [1-9][0-9]* blocks checked, 0 failed"
check "identify sha256/null" 0 "^subnqn +: $NQN" "$SENS" identify -r "$(trid $H1)" --dhchap-secret "$K1"
check "perf sha256/null randrw 4k verify" 0 "$VERIFIED" "$SENS" perf -r "$(trid $H1)" \
  --dhchap-secret "$K1" --rw randrw --bs 4k --qd 8 --queues 2 --time "$TIME" --verify --size 16M
check "perf sha384/ffdhe2048 bidirectional randwrite 128k verify" 0 "$VERIFIED" "$SENS" perf \
  -r "$(trid $H2)" --dhchap-secret "$K2" --dhchap-ctrl-secret "$C2" --rw randwrite --bs 128k \
  --qd 8 --queues 2 --time "$TIME" --verify --size 32M
check "perf sha512/ffdhe4096 randread 16k verify digests" 0 "$VERIFIED" "$SENS" perf \
  -r "$(trid $H3)" --dhchap-secret "$K3" --rw randread --bs 16k --qd 8 --queues 2 --time "$TIME" \
  --verify --size 4M --hdr-digest --data-digest
check "wrong key refused" 1 "FAILURE1|refused" "$SENS" perf -r "$(trid $H1)" --dhchap-secret "$BAD" \
  --time 1 -q
check "wrong controller key refused" 1 "controller's response does not match" "$SENS" perf \
  -r "$(trid $H2)" --dhchap-secret "$K2" --dhchap-ctrl-secret "$BAD" --time 1 -q
check "missing key refused" 1 "requires authentication" "$SENS" perf -r "$(trid $H1)" --time 1 -q
finish
