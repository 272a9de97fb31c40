#!/usr/bin/env bash
# DH-HMAC-CHAP with the Linux kernel's NVMe/TCP host (in QEMU, tests/interop/vm) against
# `sens target`: nvme connect --dhchap-secret (and --dhchap-ctrl-secret) with each hash
# (SHA-256/384/512) and the null, ffdhe2048, ffdhe3072 and ffdhe4096 groups, fio verify after
# authenticating, re-authentication through sysfs, and connects with a wrong or a missing key
# that the target must refuse (counted in its stats, logged without the secret).
# Usage: kernel_host_auth.sh path/to/sens   (INTEROP_LOGS=DIR keeps the logs)
set -euo pipefail
SENS=$(realpath "${1:?usage: kernel_host_auth.sh path/to/sens}")
HERE=$(cd "$(dirname "$0")" && pwd)
VMDIR=${SENS_VM_DIR:-$HERE/vm} # the Linux VM: build.sh makes (or checks) it, run.py boots it
"$VMDIR/build.sh" || { echo "kernel_host_auth: the test VM cannot be built (see above)" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'kill $TPID 2> /dev/null || true; wait 2> /dev/null || true; rm -rf "$WORK"' EXIT
# The guest's host NQN and ID are given on the nvme connect line (keys belong to a host NQN).
HOSTID=5e115e11-aaaa-4000-8000-00000000a001
HOSTNQN=nqn.2014-08.org.nvmexpress:uuid:$HOSTID
# Secrets as nvme-cli writes them: a transformed SHA-256 host key, an untransformed 48-byte
# controller key, and a key of another host (the wrong key).
KEY=$(nvme gen-dhchap-key --hmac=1 --key-length=32 --nqn="$HOSTNQN")
CKEY=$(nvme gen-dhchap-key --hmac=0 --key-length=48)
BADKEY=$(nvme gen-dhchap-key --hmac=3 --key-length=64 --nqn="$HOSTNQN")
# One subsystem per hash / DH group pair the target insists on (the kernel offers them all).
PAIRS="sha256:null sha384:ffdhe2048 sha512:ffdhe3072 sha256:ffdhe4096"
subs=""
for p in $PAIRS; do
  h=${p%%:*} g=${p##*:}
  subs="$subs{\"nqn\": \"nqn.2026-11.dev.sens:auth-$h-$g\", \"namespaces\": [\"ram:64M\"],
   \"host_keys\": {\"$HOSTNQN\": \"$KEY\"}, \"ctrl_keys\": {\"$HOSTNQN\": \"$CKEY\"},
   \"dhchap_hashes\": [\"$h\"], \"dhchap_dhgroups\": [\"$g\"]},"
done
for attempt in 1 2 3 4 5; do
  PORT=$((20000 + RANDOM % 20000))
  cat > "$WORK/target.json" << EOF2
{"listen": ["127.0.0.1:$PORT"], "discovery_port": 0, "subsystems": [${subs%,}]}
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
"$VMDIR/run.py" guest_kernel_host_auth.sh -q --timeout 500 --guestfwd 4420:$PORT \
  --file guest_common.sh --env "PAIRS=$PAIRS" --env "HOSTNQN=$HOSTNQN" --env "HOSTID=$HOSTID" \
  --env "KEY=$KEY" --env "CKEY=$CKEY" --env "BADKEY=$BADKEY" \
  --log "$WORK/vm.log" > /dev/null || rc=$?
grep -E '@@NOTE (STEP|FAILURES)|^\[[ 0-9.]*\] +dmesg: ' "$WORK/vm.log" | sed 's/^\[[ 0-9.]*\] //'
kill -USR1 $TPID
sleep 0.5
kill -INT $TPID
wait $TPID || { echo "target exited with $?"; rc=1; }
TPID=
# The target counted the refused exchanges, and no secret reached its log.
python3 - "$WORK/stats.json" << 'EOF3' || rc=1
import json, sys
a = json.load(open(sys.argv[1]))["auth"]
print("target auth stats:", a)
sys.exit(0 if a["succeeded"] > 0 and a["failed"] >= 1 else 1)
EOF3
if grep -qF "${KEY:10:20}" "$WORK/target.log" || grep -qF "${BADKEY:10:20}" "$WORK/target.log"; then
  echo "a secret appears in the target's log"; rc=1
fi
grep -q "dhchap: host '$HOSTNQN'" "$WORK/target.log" || { echo "no log line for the refused host"; rc=1; }
if [ $rc != 0 ]; then
  echo "---- VM log (tail)"; tail -n 80 "$WORK/vm.log"
  echo "---- target log"; tail -n 30 "$WORK/target.log"
fi
[ -z "${INTEROP_LOGS:-}" ] || { mkdir -p "$INTEROP_LOGS"; cp "$WORK"/*.log "$INTEROP_LOGS"/; }
echo "kernel_host_auth: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
