#!/usr/bin/env bash
# Live management under a real host (issue 28): the Linux kernel's NVMe/TCP host (in QEMU,
# tests/interop/vm; guest_kernel_host_live.sh) is connected to `sens target` and runs fio
# verify on namespace 1 while this script, over the target's RPC socket (`sens rpc`),
# hot-adds a namespace, resizes the file namespace 2 from 64 to 128 MiB, adds a listener
# (through which the guest connects a second path, moves I/O over it, and disconnects it),
# and removes the hot-added namespace. The guest must see each change without reconnecting,
# and fio must see no error. The guest asks for each change with a "@@NOTE WANT <method>"
# console line; this script answers in the guest's /host (9p): <method>.done or .fail.
# Usage: kernel_host_live.sh path/to/sens   (INTEROP_LOGS=DIR keeps the VM and target logs.)
set -euo pipefail
SENS=$(realpath "${1:?usage: kernel_host_live.sh path/to/sens}")
HERE=$(cd "$(dirname "$0")" && pwd)
VMDIR=${SENS_VM_DIR:-$HERE/vm} # the Linux VM: build.sh makes (or checks) it, run.py boots it
"$VMDIR/build.sh" || { echo "kernel_host_live: the test VM cannot be built (see above)" >&2; exit 2; }

WORK=$(mktemp -d)
TPID= VM=
cleanup() {
  [ -z "$VM" ] || kill "$VM" 2> /dev/null || true
  [ -z "$TPID" ] || kill "$TPID" 2> /dev/null || true
  wait 2> /dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
NQN=nqn.2026-11.dev.sens:interop-live
SOCK=$WORK/rpc.sock
mkdir "$WORK/share"              # the guest's /host: the answers to its requests
truncate -s 64M "$WORK/ns2.img" # namespace 2, resized to 128 MiB under the host
T0=$SECONDS
say() { echo "[host +$((SECONDS - T0)) s] $*"; }
free_port() { ! (exec 3<> "/dev/tcp/127.0.0.1/$1") 2> /dev/null; }

# Random ports: PORT now, LPORT for the listener added later (so the VM can forward it from
# the start); a port someone else holds makes the target refuse to start: try others.
for attempt in 1 2 3 4 5; do
  PORT=$((20000 + RANDOM % 20000))
  LPORT=$((PORT + 1))
  free_port $LPORT || continue
  cat > "$WORK/target.json" << EOF2
{
  "listen": ["127.0.0.1:$PORT"],
  "discovery_port": 0,
  "subsystems": [{"nqn": "$NQN", "namespaces": ["ram:256M", "file:$WORK/ns2.img"]}]
}
EOF2
  "$SENS" target --config "$WORK/target.json" --rpc "$SOCK" --stats-json "$WORK/stats.json" \
    > "$WORK/target.log" 2>&1 &
  TPID=$!
  for _ in $(seq 50); do
    grep -q "listening on" "$WORK/target.log" && break
    kill -0 $TPID 2> /dev/null || break
    sleep 0.1
  done
  grep -q "listening on" "$WORK/target.log" && break
  kill $TPID 2> /dev/null || true
  wait $TPID 2> /dev/null || true
  TPID=
  grep -q "cannot listen" "$WORK/target.log" || break
done
[ -n "$TPID" ] || { echo "kernel_host_live: the target did not start"; cat "$WORK/target.log"; exit 1; }
rpc() { "$SENS" rpc --socket "$SOCK" --timeout 30 "$@"; }
rpc --wait 10 framework_wait_init > /dev/null ||
  { echo "kernel_host_live: the target's RPC socket does not answer"; cat "$WORK/target.log"; exit 1; }

# answer METHOD ARGS...: makes the change the guest asked for; the guest reads the result.
NEW_NSID=
answer() {
  local method=$1 out
  shift
  say "rpc $method $*"
  if out=$(rpc "$method" "$@" 2>&1); then
    say "  -> $(echo "$out" | tr -d ' \n')"
    if [ "$method" = namespace_add ]; then # the guest wants the new nsid
      NEW_NSID=$(echo "$out" | sed -n 's/.*"nsid": *\([0-9]*\).*/\1/p')
      out=$NEW_NSID
    fi
    echo "$out" > "$WORK/share/.$method"
    mv "$WORK/share/.$method" "$WORK/share/$method.done"
  else
    say "  -> FAILED: $out"
    failed_rpcs+=("$method")
    echo "$out" > "$WORK/share/.$method"
    mv "$WORK/share/.$method" "$WORK/share/$method.fail"
  fi
}
failed_rpcs=()

cd "$HERE"
"$VMDIR/run.py" guest_kernel_host_live.sh -q --timeout 420 --guestfwd 4420:$PORT \
  --guestfwd 4421:$LPORT --file guest_common.sh --share "$WORK/share" --env NQN=$NQN \
  --log "$WORK/vm.log" > /dev/null &
VM=$!
say "target on 127.0.0.1:$PORT (pid $TPID), listener to add on 127.0.0.1:$LPORT; VM started"
answered=" "
while kill -0 $VM 2> /dev/null; do
  for method in $(sed -n 's/.*@@NOTE WANT \([a-z_]*\).*/\1/p' "$WORK/vm.log" 2> /dev/null); do
    case "$answered" in *" $method "*) continue ;; esac
    answered+="$method "
    case $method in
      namespace_add) answer namespace_add --nqn "$NQN" --spec ram:64M ;;
      namespace_resize) answer namespace_resize --nqn "$NQN" --nsid 2 --size 128M ;;
      listener_add) answer listener_add --address 127.0.0.1 --port "$LPORT" ;;
      namespace_remove)
        if [ -n "$NEW_NSID" ]; then
          answer namespace_remove --nqn "$NQN" --nsid "$NEW_NSID"
        else
          echo "no namespace was hot-added" > "$WORK/share/namespace_remove.fail"
        fi ;;
      *) echo "unknown request" > "$WORK/share/$method.fail" ;;
    esac
  done
  sleep 0.2
done
rc=0
wait $VM || rc=$?
VM=
say "VM done"
grep -E '@@NOTE |^\[[ 0-9.]*\] +dmesg: ' "$WORK/vm.log" | grep -v '@@NOTE WANT' | sed 's/^\[[ 0-9.]*\] //' || true
for m in namespace_add namespace_resize listener_add namespace_remove; do
  case "$answered" in *" $m "*) ;; *) echo "the guest never asked for $m"; rc=1 ;; esac
done
[ ${#failed_rpcs[@]} = 0 ] || { echo "RPCs that failed: ${failed_rpcs[*]}"; rc=1; }
# What the target has now: namespaces 1 and 2 (128 MiB), and two listeners.
rpc subsystem_list --nqn "$NQN" | python3 -c '
import json, sys
s = json.load(sys.stdin)[0]
print("target after the changes: namespaces", ", ".join("%d (%s, %d MiB)" % (
    n["nsid"], n["spec"].split(":")[0], n["size_bytes"] >> 20) for n in s["namespaces"]),
    "; listeners", ", ".join("%s:%d" % (l["address"], l["port"]) for l in s["listeners"]))
' || true
kill -INT $TPID 2> /dev/null || true
wait $TPID || { echo "target exited with $?"; rc=1; }
TPID=
grep -E '^\[(info|warn|error)' "$WORK/target.log" | sed 's/^/target: /' || true
if [ $rc != 0 ]; then
  echo "---- VM log (tail)"; tail -n 80 "$WORK/vm.log"
  echo "---- target log"; tail -n 30 "$WORK/target.log"
fi
[ -z "${INTEROP_LOGS:-}" ] || { mkdir -p "$INTEROP_LOGS"; cp "$WORK"/*.log "$INTEROP_LOGS"/; }
echo "kernel_host_live: $([ $rc = 0 ] && echo PASS || echo FAIL) ($((SECONDS - T0)) s)"
exit $rc
