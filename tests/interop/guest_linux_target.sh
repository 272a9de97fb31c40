# Runs inside the test VM (BusyBox sh), started by linux_target_vm.sh: the Linux kernel target
# (nvmet-tcp) on guest port 4420 with one namespace on a memory-backed null_blk disk (SIZE_MB,
# 256 by default), any host admitted, discovery on the same port. Prints TARGET_READY, then
# holds until the host connects to guest port 5555 or HOLD seconds pass.
. /files/guest_common.sh
set -e
DEV=$(nullblk_dev "${SIZE_MB:-256}" 1)
nvmet_load
nvmet_subsys "$NQN"
nvmet_ns "$NQN" 1 "$DEV"
nvmet_port 1 0.0.0.0 4420
nvmet_link 1 "$NQN"
note "TARGET_READY nqn=$NQN dev=$DEV listening 10.0.2.15:4420"
set +e
wait_release 5555 "${HOLD:-400}"
note "released rc=$?"
dmesg | grep -E 'nvmet' | tail -n 20
