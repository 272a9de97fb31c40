# Guest side of kernel_host_multipath.sh (busybox sh): connects to two sens gateways serving
# one subsystem (guest ports 4420 = gateway A, ANA optimized; 4421 = gateway B,
# non-optimized), checks one multipath device with two paths and their ANA states, runs fio
# verify on it while the host kills gateway A and restarts it, then waits for the path to
# come back live.
. /files/guest_common.sh
nvme_host_load
opts="--reconnect-delay=1 --ctrl-loss-tmo=120"
nvme connect -t tcp -a $ADDR -s 4420 -n "$NQN" $opts
step connect-a $?
nvme connect -t tcp -a $ADDR -s 4421 -n "$NQN" $opts
step connect-b $?
sleep 2
dmesg | grep -E "nvme" | sed "s/^/@@NOTE dmesg-connect: /"
nvme list-subsys > /tmp/subsys 2>&1
cat /tmp/subsys | sed 's/^/@@NOTE subsys: /' | while read -r l; do echo "$l"; done
paths=$(grep -c "tcp traddr" /tmp/subsys)
[ "$paths" = 2 ]
step two-paths $?
# Each path's ANA state as the host took it from the ANA log page (sysfs of the per-path
# namespace node nvmeXcYnZ), by the gateway port it goes to.
ana_ok=0
for c in /sys/class/nvme/nvme*; do
  port=$(sed -n 's/.*trsvcid=\([0-9]*\).*/\1/p' "$c/address")
  state=$(cat "$c"/nvme*c*n*/ana_state 2> /dev/null | head -n 1)
  note "path $(basename "$c") port $port ana_state $state"
  [ "$port" = 4420 ] && [ "$state" = optimized ] && ana_ok=$((ana_ok + 1))
  [ "$port" = 4421 ] && [ "$state" = non-optimized ] && ana_ok=$((ana_ok + 1))
done
[ $ana_ok = 2 ]
step ana-states $?
# Each gateway's controller ID from its own range (--cntlid-range, a: 1-1000, b: 1001-2000).
ids_ok=0
for c in /sys/class/nvme/nvme*; do
  port=$(sed -n 's/.*trsvcid=\([0-9]*\).*/\1/p' "$c/address")
  id=$(cat "$c/cntlid")
  note "path $(basename "$c") port $port cntlid $id"
  [ "$port" = 4420 ] && [ "$id" -ge 1 ] && [ "$id" -le 1000 ] && ids_ok=$((ids_ok + 1))
  [ "$port" = 4421 ] && [ "$id" -ge 1001 ] && [ "$id" -le 2000 ] && ids_ok=$((ids_ok + 1))
done
[ $ids_ok = 2 ]
step cntlid-ranges $?
# One multipath block device: nvmeXnY (the per-path nodes are nvmeXcYnZ and hidden).
devs=$(ls /sys/block | grep -E '^nvme[0-9]+n[0-9]+$')
[ "$(echo "$devs" | wc -w)" = 1 ]
step one-multipath-device $?
DEV=/dev/$(echo $devs | cut -d' ' -f1)
note "multipath device $DEV"
nvme list-subsys $DEV 2>&1 | sed 's/^/@@NOTE subsys-ns: /'
note "FIO_START"
fio --name=mp --filename=$DEV --ioengine=libaio --direct=1 --rw=randwrite --bs=4k --iodepth=16 \
  --size=32M --time_based --runtime=${RUNTIME:-45} --verify=crc32c --verify_backlog=128 \
  --verify_fatal=1 --output=/tmp/fio.out > /dev/null 2>&1
rc=$?
grep -E "err=|WRITE:|READ:" /tmp/fio.out | sed 's/^/@@NOTE fio: /' | while read -r l; do echo "$l"; done
[ $rc = 0 ] && grep -q "err= 0" /tmp/fio.out
step fio-verify-through-failover $?
# The restarted gateway's path comes back live.
back() { [ "$(nvme list-subsys 2> /dev/null | grep -c 'live')" = 2 ]; }
wait_for 90 back
step path-back-live $?
nvme list-subsys 2>&1 | sed 's/^/@@NOTE subsys-after: /' | while read -r l; do echo "$l"; done
dmesg | grep -E "nvme" | tail -n 25 | sed "s/^/@@NOTE dmesg: /"
dmesg | grep -qE "nvme.*(Reconnecting|reconnect|error recovery)"
step host-logged-path-change $?
nvme disconnect -n "$NQN" > /dev/null
step disconnect $?
note "FAILURES $fails"
[ $fails = 0 ]
