# Runs inside the test VM (BusyBox sh), driven by kernel_host_fs.sh: the Linux
# kernel's nvme-tcp host against a sens target on the host (guest 10.0.2.100:4420).
#   NQN       a RAM namespace: ext4 (mkfs with its discard, files, fsck, remount, online
#             discard), blkdiscard, then fio under load (iodepth 32, 4 jobs, 2 and 4 queues)
#   FILE_NQN  a file namespace: a pattern is written, the host kills the target (SIGKILL)
#             and restarts it on the same port; I/O submitted during the outage waits, the
#             controller reconnects, the pattern is read back and more I/O runs.  The guest
#             asks for the restart with a "@@NOTE RESTART-TARGET" line; the host's /host (9p)
#             says when it restarted.
# Every step prints "@@NOTE STEP <name> ok|FAIL"; the exit status is the number of failures.
. /files/guest_common.sh
nvme_host_load
NQN=${NQN:?}
FILE_NQN=${FILE_NQN:?}

connect() {  # connect NQN [nvme connect options]: sets NS (/dev/nvmeXnY) and BLK (nvmeXnY)
  nq=$1
  shift
  NS= BLK=
  nvme connect -t tcp -a $ADDR -s 4420 -n "$nq" "$@" || return 1
  NS=$(nvme_ns_dev "$nq" 20) || return 2
  BLK=$(basename "$NS")
}

# ---- a file system on the RAM namespace -------------------------------------------------
fs_steps() {
  connect "$NQN"
  step fs-connect $?
  [ -n "$NS" ] || return
  # The target sets ONCS.DSM, so the kernel offers discard on the namespace.
  dmax=$(cat /sys/block/$BLK/queue/discard_max_bytes)
  echo "discard_max_bytes=$dmax discard_granularity=$(cat /sys/block/$BLK/queue/discard_granularity)"
  [ "$dmax" -gt 0 ]
  step fs-discard-offered $?
  # mke2fs first discards the whole device (its default); a failed discard is only a
  # message to it, so its output must say the discard was done.
  mkfs.ext4 -F "$NS" > /tmp/mkfs.log 2>&1
  rc=$?
  tr -d '\b' < /tmp/mkfs.log
  step fs-mkfs $rc
  # (When its first, probing discard fails, mke2fs says nothing about discarding.)
  grep 'Discarding device blocks:' /tmp/mkfs.log | grep -q done
  step fs-mkfs-discard $?
  mkdir -p /mnt/fs
  mount -t ext4 "$NS" /mnt/fs
  rc=$?
  step fs-mount $rc
  [ $rc = 0 ] || { nvme disconnect -n "$NQN"; return; }
  # A few MiB of random data and many small files of assorted sizes.
  rc=0
  head -c 6291456 /dev/urandom > /mnt/fs/big.bin || rc=1
  i=0
  while [ $i -lt 400 ]; do
    d=/mnt/fs/small/d$((i % 16))
    [ -d $d ] || mkdir -p $d || rc=1
    head -c $(((i * 7919) % 20000 + 1)) /dev/urandom > $d/f$i || rc=1
    i=$((i + 1))
  done
  (cd /mnt/fs && find . -type f | sort | xargs sha256sum) > /tmp/sums || rc=1
  echo "files: $(wc -l < /tmp/sums), $(du -sk /mnt/fs | cut -f1) KiB"
  sync || rc=1
  step fs-write-files $rc
  umount /mnt/fs
  step fs-umount $?
  e2fsck -fn "$NS"
  step fs-fsck $?
  # Remount (with online discard) from a cold cache and check every file.
  echo 3 > /proc/sys/vm/drop_caches
  mount -t ext4 -o discard "$NS" /mnt/fs
  step fs-remount $?
  (cd /mnt/fs && sha256sum -c -s /tmp/sums)
  step fs-verify-files $?
  # Deleting the small files discards their blocks when the journal commits.
  rm -rf /mnt/fs/small && sync
  step fs-delete-online-discard $?
  grep ' ./big.bin$' /tmp/sums > /tmp/sums.big
  (cd /mnt/fs && sha256sum -c -s /tmp/sums.big)
  step fs-verify-after-delete $?
  umount /mnt/fs
  e2fsck -fn "$NS"
  step fs-fsck-after-delete $?
  blkdiscard -o 0 -l 1048576 "$NS"
  step blkdiscard-1m $?
  blkdiscard "$NS"
  step blkdiscard-all $?
  nvme disconnect -n "$NQN"
  step fs-disconnect $?
}

# ---- load: 4 jobs at iodepth 32, each on its own 8 MiB, written and verified -----------
load_run() {  # load_run NAME "CONNECT OPTIONS" MIN-QUEUES [fio options]
  name=$1 copts=$2 minq=$3
  shift 3
  connect "$NQN" $copts
  step $name-connect $?
  [ -n "$NS" ] || return
  # The namespace node is multipath's head, without blk-mq queues: the kernel says them.
  c=$(ctrl_of "$NQN")
  q=$(dmesg | sed -n "s/.*$c: creating \([0-9]*\) I\/O queues.*/\1/p" | tail -n 1)
  echo "$name: ${q:-?} I/O queues: $(dmesg | grep "$c: mapped" | tail -n 1)"
  [ "${q:-0}" -ge "$minq" ]
  step $name-queues $?
  fio --name=$name --filename="$NS" --ioengine=libaio --direct=1 --iodepth=32 --numjobs=4 \
      --size=8M --offset_increment=8M --verify=crc32c --do_verify=1 --verify_fatal=1 \
      --group_reporting=1 --eta=never "$@"
  step $name-fio-verify $?
  nvme disconnect -n "$NQN"
  step $name-disconnect $?
}

# ---- the target restarts under a connected host -----------------------------------------
pattern() {  # 32 MiB of 64 KiB writes with crc32c headers (verify_only reads them back)
  fio --name=pattern --filename="$NS" --ioengine=libaio --direct=1 --iodepth=16 --rw=write \
      --bs=64k --size=32M --verify=crc32c --verify_fatal=1 --randseed=20261101 --eta=never "$@"
}
sum32m() { dd if="$NS" bs=1M count=32 iflag=direct 2> /dev/null | sha256sum | cut -d' ' -f1; }
ctrl_state() { cat /sys/class/nvme/$CTRL/state; }
not_live() { [ "$(ctrl_state)" != live ]; }
reconnected() {  # live again, and the kernel says it reconnected (not merely never noticed)
  [ "$(ctrl_state)" = live ] && dmesg | grep -q "$CTRL: Successfully reconnected"
}

restart_steps() {
  connect "$FILE_NQN" --reconnect-delay=1 --ctrl-loss-tmo=60
  step restart-connect $?
  [ -n "$NS" ] || return
  CTRL=$(ctrl_of "$FILE_NQN")
  pattern --do_verify=0
  step restart-write-pattern $?
  before=$(sum32m)
  d0=$(dmesg | wc -l)
  note "RESTART-TARGET $CTRL"
  # The kernel notices the dead connection and tears the queues down (state connecting).
  wait_for 30 not_live
  step restart-ctrl-noticed $?
  # I/O submitted during the outage waits for the reconnect, then goes to the new target.
  fio --name=outage --filename="$NS" --ioengine=libaio --direct=1 --iodepth=8 --rw=randwrite \
      --bs=4k --offset=64M --size=4M --verify=crc32c --do_verify=1 --verify_fatal=1 \
      --eta=never > /tmp/outage.log 2>&1 &
  fpid=$!
  echo "$CTRL: $(ctrl_state) when the outage I/O was started"
  wait_for 60 test -e /host/restarted -o -e /host/restart-failed
  [ -e /host/restarted ]
  step restart-target-restarted $?
  t0=$(up)
  wait_for 60 reconnected
  rc=$?
  echo "$CTRL: $(ctrl_state) $(awk -v a="$t0" -v b="$(up)" 'BEGIN { printf "%.1f s", b - a }') after the target's restart"
  step restart-reconnected $rc
  # Expected while the target is gone: error recovery, a keep-alive cut short, failed
  # reconnects, failed sends on the dead socket, and the relay's (socat's) own error
  # message, which QEMU's user-mode network (run.py --guestfwd) puts into the guest's stream
  # ("2026/...", read as PDU type 50).
  dmesg | tail -n +$((d0 + 1)) | grep -E "$DMESG_ERRORS" |
    grep -E "nvme $CTRL: (starting error recovery|failed nvme_keep_alive_end_io error=|receive failed: +-22|unsupported pdu type \(50\)|failed to send request -(32|104)|failed to connect socket|Failed reconnect)" \
      >> /tmp/dmesg.allowed
  dmesg | tail -n +$((d0 + 1)) | grep "$CTRL"
  wait $fpid
  rc=$?
  cat /tmp/outage.log
  step restart-io-during-outage $rc
  pattern --verify_only=1
  step restart-verify-pattern $?
  after=$(sum32m)
  echo "sha256 of the first 32 MiB: before $before, after $after"
  [ -n "$before" ] && [ "$before" = "$after" ]
  step restart-checksum $?
  fio --name=more --filename="$NS" --ioengine=libaio --direct=1 --iodepth=32 --numjobs=2 \
      --rw=randrw --bs=4k --offset=96M --size=8M --offset_increment=8M --verify=crc32c \
      --do_verify=1 --verify_fatal=1 --group_reporting=1 --eta=never
  step restart-more-io $?
  nvme flush "$NS" -n 1
  step restart-flush $?
  nvme disconnect -n "$FILE_NQN"
  step restart-disconnect $?
}

fs_steps
load_run load-4k-randrw "" 1 --rw=randrw --bs=4k
load_run load-4-queues "--nr-io-queues=2 --nr-write-queues=2" 2 --rw=randrw --bsrange=4k-128k
restart_steps

# Only the restart may have made the kernel log errors (those lines are in /tmp/dmesg.allowed).
dmesg_check dmesg-clean
note "FAILURES $fails"
exit $fails
