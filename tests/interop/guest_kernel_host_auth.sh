# Runs inside the test VM (BusyBox sh): the Linux kernel's DH-HMAC-CHAP against a sens
# target on the host (guest 10.0.2.100:4420). Every step prints "@@NOTE STEP <name> ok|FAIL";
# the exit status is the number of failures.
. /files/guest_common.sh
nvme_host_load
: "${PAIRS:?}" "${HOSTNQN:?}" "${HOSTID:?}" "${KEY:?}" "${CKEY:?}" "${BADKEY:?}"
ID="--hostnqn=$HOSTNQN --hostid=$HOSTID"

fio_verify() {  # fio_verify DEV NAME ARGS...
  dev=$1; name=$2; shift 2
  fio --name="$name" --filename="$dev" --ioengine=libaio --direct=1 --size=8M --iodepth=16 \
      --verify=crc32c --do_verify=1 --verify_fatal=1 --eta=never "$@"
}

n=0
for p in $PAIRS; do
  h=${p%%:*}; g=${p##*:}
  NQN=nqn.2026-11.dev.sens:auth-$h-$g
  # Every other subsystem also authenticates the controller (bidirectional).
  ctrl=""
  [ $((n % 2)) = 1 ] && ctrl="--dhchap-ctrl-secret=$CKEY"
  n=$((n + 1))
  mark=$(dmesg | wc -l)
  nvme connect -t tcp -a $ADDR -s 4420 -n "$NQN" $ID --dhchap-secret="$KEY" $ctrl
  rc=$?
  step "connect-$h-$g${ctrl:+-bidirectional}" $rc
  [ $rc = 0 ] || continue
  # The kernel says which hash and group it authenticated with.
  since() { dmesg | tail -n +$((mark + 1)); }
  since | grep -q "authenticated with hash hmac($h) dhgroup $g"
  step "negotiated-$h-$g" $?
  if [ -n "$ctrl" ]; then since | grep -q "controller authenticated"; step "ctrl-authenticated-$h-$g" $?; fi
  NS=$(nvme_ns_dev "$NQN" 20)
  step "namespace-$h-$g" $?
  if [ -n "$NS" ]; then
    fio_verify "$NS" randrw4k --rw=randrw --bs=4k
    step "fio-verify-$h-$g" $?
    fio_verify "$NS" randwrite128k --rw=randwrite --bs=128k
    step "fio-verify-r2t-$h-$g" $?
    # Re-authentication: writing the secret again makes the host authenticate every queue anew.
    c=$(ctrl_of "$NQN")
    if [ "$h" = sha256 ] && [ -n "$c" ] && [ -w /sys/class/nvme/$c/dhchap_secret ]; then
      mark=$(dmesg | wc -l)
      echo "$KEY" > /sys/class/nvme/$c/dhchap_secret
      wait_for 20 sh -c "dmesg | tail -n +$((mark + 1)) | grep -q 'qid 0: authenticated with hash'"
      step "reauthenticate-$g" $?
      fio_verify "$NS" randrw4k-after --rw=randrw --bs=4k
      step "fio-verify-after-reauth-$g" $?
    fi
  fi
  nvme disconnect -n "$NQN"
  step "disconnect-$h-$g" $?
done

# Refusals: a wrong host key, no key at all, and a wrong controller key (the host refuses).
NQN=nqn.2026-11.dev.sens:auth-sha256-null
nvme connect -t tcp -a $ADDR -s 4420 -n "$NQN" $ID --dhchap-secret="$BADKEY" > /dev/null 2>&1
rc=$?
if [ $rc = 0 ]; then nvme disconnect -n "$NQN"; step deny-wrong-key 1; else step deny-wrong-key 0; fi
nvme connect -t tcp -a $ADDR -s 4420 -n "$NQN" $ID > /dev/null 2>&1
rc=$?
if [ $rc = 0 ]; then nvme disconnect -n "$NQN"; step deny-missing-key 1; else step deny-missing-key 0; fi
nvme connect -t tcp -a $ADDR -s 4420 -n "$NQN" $ID --dhchap-secret="$KEY" \
  --dhchap-ctrl-secret="$BADKEY" > /dev/null 2>&1
rc=$?
if [ $rc = 0 ]; then nvme disconnect -n "$NQN"; step deny-wrong-ctrl-key 1; else step deny-wrong-ctrl-key 0; fi

# The refused connects are the only errors the kernel may have logged.
dmesg_check dmesg-clean "qid 0: (authentication failed|no key|controller authentication failed|auth|failed to)|failed to connect queue: 0 ret=|Connect command failed|failed to connect"
note "FAILURES $fails"
exit $fails
