# Runs inside the test VM (BusyBox sh), driven by kernel_host_live.sh: live management of
# a sens target under the Linux kernel's nvme-tcp host. The guest connects (10.0.2.100:4420),
# runs fio verify on namespace 1 throughout, and asks the host for one change at a time with
# a "@@NOTE WANT <method>" console line; the host makes it over `sens rpc` and answers in
# /host (9p): <method>.done (the RPC's result) or <method>.fail (why). The guest then polls
# for the effect, without reconnecting:
#   namespace_add     a RAM namespace appears (sysfs and `nvme list`)
#   namespace_resize  namespace 2 (a 64 MiB file) grows to 128 MiB
#   listener_add      a new listener (guest port 4421): a second path connects through it,
#                     carries I/O (round-robin), and is disconnected again
#   namespace_remove  the hot-added namespace (never used for I/O) goes away
# Every step prints "@@NOTE STEP <name> ok|FAIL"; the exit status is the number of failures.
. /files/guest_common.sh
nvme_host_load
NQN=${NQN:?}
RUNTIME=${RUNTIME:-240} # fio's cap; it is stopped (--trigger-file) after the last change

# ns_blk NSID: prints the block device (nvmeXnY) of namespace NSID of $NQN; 1 if none.
ns_blk() {
  for s in /sys/class/nvme-subsystem/*; do
    [ "$(cat "$s/subsysnqn" 2> /dev/null)" = "$NQN" ] || continue
    for n in "$s"/nvme*n* "$s"/nvme*/nvme*n*; do
      b=${n##*/}
      case $b in *c*n* | *"*"*) continue ;; esac # a path's node, or no match
      [ "$(cat "$n/nsid" 2> /dev/null)" = "$1" ] && [ -b "/dev/$b" ] && { echo "$b"; return 0; }
    done
  done
  return 1
}
has_ns() { ns_blk "$1" > /dev/null; }
no_ns() { ! ns_blk "$1" > /dev/null; }
in_nvme_list() { nvme list 2> /dev/null | grep -q "^/dev/$1 "; }
sectors_are() { [ "$(cat "/sys/block/$1/size" 2> /dev/null)" = "$2" ]; }

# ask METHOD: the host makes the change; prints its answer, 1 if it failed or did not answer.
ask() {
  note "WANT $1" >&2 # (to the console: callers take the answer from stdout)
  wait_for 60 test -e "/host/$1.done" -o -e "/host/$1.fail"
  if [ -e "/host/$1.done" ]; then
    cat "/host/$1.done"
    return 0
  fi
  echo "the host's $1 failed: $(cat "/host/$1.fail" 2> /dev/null || echo 'no answer in 60 s')" >&2
  return 1
}

fio_running() { kill -0 $FIO 2> /dev/null; }

nvme connect -t tcp -a $ADDR -s 4420 -n "$NQN"
step connect $?
CTRL=$(ctrl_of "$NQN")
CNTLID=$(cat /sys/class/nvme/$CTRL/cntlid 2> /dev/null)
wait_for 20 has_ns 1 && wait_for 20 has_ns 2
step namespaces-1-2 $?
B1=$(ns_blk 1)
B2=$(ns_blk 2)
note "controller $CTRL cntlid $CNTLID; namespace 1 $B1, namespace 2 $B2 ($(cat /sys/block/$B2/size 2> /dev/null) sectors)"
sectors_are "$B2" 131072
step file-namespace-64m $?
[ -n "$B1" ] || { note "FAILURES $((fails + 1))"; exit $((fails + 1)); }

# fio on namespace 1 for the whole run: random 4 KiB writes, each verified (crc32c) by reads
# that follow 128 writes behind; stopped once the last change is done.
rm -f /tmp/fio.stop
fio --name=live --filename=/dev/$B1 --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
  --iodepth=16 --size=64M --time_based --runtime=$RUNTIME --verify=crc32c --verify_backlog=128 \
  --verify_fatal=1 --verify_state_save=0 --trigger-file=/tmp/fio.stop --output=/tmp/fio.out > /tmp/fio.stderr 2>&1 &
FIO=$!
sleep 3
fio_running
step fio-started $?
note "FIO_START"

# ---- 1. a namespace is hot-added ---------------------------------------------------------
NEW=
if NEW=$(ask namespace_add); then
  wait_for 20 has_ns "$NEW"
  rc=$?
  B3=$(ns_blk "$NEW")
  note "hot-added namespace $NEW: ${B3:-none} ($(cat /sys/block/$B3/size 2> /dev/null) sectors)"
  [ $rc = 0 ] && sectors_are "$B3" 131072 && wait_for 10 in_nvme_list "$B3"
  step hot-add-seen $?
else
  step hot-add-seen 1
fi
nvme list 2>&1 | sed 's/^/@@NOTE nvme-list: /'

# ---- 2. the file namespace (2) is resized from 64 to 128 MiB -----------------------------
if ask namespace_resize > /dev/null; then
  wait_for 20 sectors_are "$B2" 262144
  rc=$?
  note "namespace 2 $B2: $(cat /sys/block/$B2/size) sectors after the resize"
  step resize-seen $rc
else
  step resize-seen 1
fi

# ---- 3. a listener is added; a second path connects through it, and goes -----------------
path_ctrl() {  # the controller of $NQN whose address is guest port $1
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2> /dev/null)" = "$NQN" ] || continue
    [ "$(sed -n 's/.*trsvcid=\([0-9]*\).*/\1/p' "$c/address")" = "$1" ] && { basename "$c"; return 0; }
  done
  return 1
}
path_ios() {  # reads + writes through controller $1's path to namespace 1
  for p in /sys/class/nvme/$1/nvme*c*n*; do
    [ "$(cat "$p/nsid" 2> /dev/null)" = 1 ] && { awk '{ print $1 + $5 }' "$p/stat"; return 0; }
  done
  echo 0
}
path_moved_io() { [ "$(path_ios "$CTRL2")" -gt 0 ]; }
paths() { nvme list-subsys 2> /dev/null | grep -c "tcp traddr.* live"; }
if ask listener_add > /dev/null; then
  nvme connect -t tcp -a $ADDR -s 4421 -n "$NQN"
  rc=$?
  CTRL2=$(path_ctrl 4421)
  nvme list-subsys 2>&1 | sed 's/^/@@NOTE subsys: /'
  [ $rc = 0 ] && [ -n "$CTRL2" ] && [ "$(paths)" = 2 ]
  step second-path-connected $?
  if [ -n "$CTRL2" ]; then
    # Round-robin sends some of fio's I/O down the new path.
    SUBSYS=
    for s in /sys/class/nvme-subsystem/*; do
      [ "$(cat "$s/subsysnqn" 2> /dev/null)" = "$NQN" ] && SUBSYS=$s
    done
    policy=$(cat "$SUBSYS/iopolicy")
    echo round-robin > "$SUBSYS/iopolicy"
    wait_for 20 path_moved_io
    rc=$?
    note "second path $CTRL2 (cntlid $(cat /sys/class/nvme/$CTRL2/cntlid)): $(path_ios "$CTRL2") I/Os through it"
    step second-path-io $rc
    echo "$policy" > "$SUBSYS/iopolicy"
    sleep 2 # the I/O that was on the new path completes
    nvme disconnect -d "$CTRL2"
    rc=$?
    gone() { ! path_ctrl 4421 > /dev/null; }
    [ $rc = 0 ] && wait_for 10 gone && [ "$(paths)" = 1 ]
    step second-path-disconnected $?
  fi
else
  step second-path-connected 1
fi

# ---- 4. the hot-added namespace (no I/O on it) is removed --------------------------------
if [ -n "$NEW" ] && ask namespace_remove > /dev/null; then
  wait_for 20 no_ns "$NEW"
  rc=$?
  [ $rc = 0 ] && ! in_nvme_list "$B3"
  step remove-seen $?
else
  step remove-seen 1
fi

# ---- fio ran throughout, without an error ------------------------------------------------
sleep 5
fio_running
step fio-outlasted-changes $?
touch /tmp/fio.stop
wait $FIO
rc=$?
cat /tmp/fio.stderr
grep -E "err=|error|verify|bad|mismatch| write:|issued rwts" /tmp/fio.out | sed 's/^ */@@NOTE fio: /'
# The verify reads (128 writes behind) are the "issued" reads; they have no time of their own.
verified=$(sed -n 's/.*issued rwts: total=\([0-9]*\),.*/\1/p' /tmp/fio.out)
note "fio: $verified blocks read back and verified"
[ $rc = 0 ] && grep -q "err= 0" /tmp/fio.out && [ "${verified:-0}" -gt 0 ]
step fio-verify $?

# The first controller stayed connected all along: same controller, same cntlid, live.
[ "$(ctrl_of "$NQN")" = "$CTRL" ] && [ "$(cat /sys/class/nvme/$CTRL/cntlid)" = "$CNTLID" ] &&
  [ "$(cat /sys/class/nvme/$CTRL/state)" = live ] &&
  ! dmesg | grep -qE "$CTRL: (Reconnecting|starting error recovery|resetting)"
step no-reconnect $?
dmesg | grep -E "nvme" | tail -n 30 | sed 's/^/@@NOTE dmesg-nvme: /'
nvme disconnect -n "$NQN" > /dev/null
step disconnect $?
dmesg_check dmesg-clean
note "FAILURES $fails"
exit $fails
