# Runs inside the test VM (BusyBox sh): the Linux kernel's nvme-tcp host against a
# sens target on the host. Guest 10.0.2.100:4420 / :8009 are forwarded to the target.
# Every step prints "@@NOTE STEP <name> ok|FAIL"; the exit status is the number of failures.
. /files/guest_common.sh
nvme_host_load
NQN=${NQN:?}
DENY_NQN=${DENY_NQN:?}

# Discovery: the log page must list the subsystem.
dlog=$(mktemp)
nvme discover -t tcp -a $ADDR -s 8009 > "$dlog" 2>&1
rc=$?
cat "$dlog"
[ $rc = 0 ] && awk -v n="$NQN" '$1 == "subnqn:" && $2 == n { f = 1 } END { exit !f }' "$dlog" || rc=1
step discover $rc

fio_verify() {  # fio_verify DEV NAME ARGS...
  dev=$1; name=$2; shift 2
  fio --name="$name" --filename="$dev" --ioengine=libaio --direct=1 --size=16M --iodepth=16 \
      --verify=crc32c --do_verify=1 --verify_fatal=1 --eta=never "$@"
}

for mode in plain digests; do
  opts=""
  [ $mode = digests ] && opts="--hdr-digest --data-digest"
  nvme connect -t tcp -a $ADDR -s 4420 -n "$NQN" $opts
  rc=$?
  step "connect-$mode" $rc
  [ $rc = 0 ] || continue
  NS=$(nvme_ns_dev "$NQN" 20)
  step "namespace-$mode" $?
  if [ -n "$NS" ]; then
    nvme id-ctrl "$NS" | grep -E '^(mn|cntlid|mdts|subnqn|ioccsz|sgls) '
    # 4 KiB random mixed I/O: writes fit in the capsule.
    fio_verify "$NS" randrw4k --rw=randrw --bs=4k
    step "fio-4k-randrw-verify-$mode" $?
    # 128 KiB writes: larger than the in-capsule size, so every write goes through R2T.
    fio_verify "$NS" randwrite128k --rw=randwrite --bs=128k
    step "fio-128k-randwrite-verify-$mode" $?
    nvme flush "$NS" -n 1
    step "flush-$mode" $?
  fi
  nvme disconnect -n "$NQN"
  step "disconnect-$mode" $?
done

# A subsystem whose allowed-hosts list does not name this host refuses the connect.
nvme connect -t tcp -a $ADDR -s 4420 -n "$DENY_NQN" > /dev/null 2>&1
rc=$?
if [ $rc = 0 ]; then nvme disconnect -n "$DENY_NQN"; step deny-unknown-host 1; else step deny-unknown-host 0; fi

# The refused connect is the only error the kernel may have logged.
dmesg_check dmesg-clean "$DENY_NQN|failed to connect queue: 0 ret="
note "FAILURES $fails"
exit $fails
