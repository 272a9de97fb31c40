# Sourced by the guest scripts of tests/interop (BusyBox sh in the test VM of tests/interop/vm,
# which gets this file with `vm/run.py --file guest_common.sh`, at /files/guest_common.sh).
# Every step prints "@@NOTE STEP <name> ok|FAIL rc=N"; $fails counts the failed ones.
ADDR=10.0.2.100                 # where the host's forwarded ports are (run.py --guestfwd)
NVMET=/sys/kernel/config/nvmet  # the kernel target's configfs
up() { cut -d' ' -f1 /proc/uptime; }
note() { echo "@@NOTE $* ($(up))"; }  # a line that the host side looks for in the console log
fails=0
step() {  # step NAME RC
  if [ "$2" = 0 ]; then note "STEP $1 ok"; else note "STEP $1 FAIL rc=$2"; fails=$((fails + 1)); fi
}

# wait_for SECONDS COMMAND...: run COMMAND every 0.1 s until it succeeds; 1 at the deadline.
wait_for() {
  t=$(($1 * 10))
  shift
  while [ $t -gt 0 ]; do
    "$@" && return 0
    sleep 0.1
    t=$((t - 1))
  done
  return 1
}

# ctrl_of NQN: prints the controller (nvmeN) connected to subsystem NQN.
ctrl_of() {
  for c in /sys/class/nvme/nvme*; do
    [ "$(cat "$c/subsysnqn" 2> /dev/null)" = "$1" ] && { basename "$c"; return 0; }
  done
  return 1
}

# Kernel messages that tell of a failed I/O, a dead queue or a damaged file system.
DMESG_ERRORS='I/O Cmd|I/O error|Buffer I/O|blk_update_request|critical (medium|target|space)|EXT4-fs (error|warning)|EXT4-fs .*(corrupt|checksum|bad )|nvme.*(timeout|error|fail|abort|invalid|unsupported|unexpected|not found|digest)|Oops|BUG:|WARNING:'

# dmesg_check STEP [ALLOW-REGEX]: the step fails, printing them, if the kernel logged error
# lines other than those that ALLOW matches (e.g. of a refused connect) or that a step put
# in /tmp/dmesg.allowed (whole lines: errors that a step expected at that time).
dmesg_check() {
  dmesg | grep -E "$DMESG_ERRORS" > /tmp/dmesg.err
  touch /tmp/dmesg.allowed
  : > /tmp/dmesg.bad
  # (Not grep -vxF -f: BusyBox's grep matches every line when the pattern file is empty.)
  while IFS= read -r l; do
    if grep -qxF -- "$l" /tmp/dmesg.allowed || { [ -n "${2:-}" ] && echo "$l" | grep -qE "$2"; }; then
      echo "  dmesg: expected: $l"
    else
      echo "$l" >> /tmp/dmesg.bad
    fi
  done < /tmp/dmesg.err
  if [ -s /tmp/dmesg.bad ]; then
    echo "dmesg: unexpected kernel error lines:"
    sed 's/^/  dmesg: /' /tmp/dmesg.bad
    step "$1" 1
  else
    step "$1" 0
  fi
}

# ---- the kernel's NVMe/TCP host ----------------------------------------------------------
nvme_host_load() { modprobe nvme-tcp; }

# nvme_ns_dev NQN [SECONDS=10]: prints the block device (/dev/nvmeXnY) of the first namespace
# of subsystem NQN once it is there: the multipath node under the subsystem, or, without
# native multipath, the controller's own.
nvme_ns_dev() {
  t=$((${2:-10} * 10))
  while [ $t -gt 0 ]; do
    for s in /sys/class/nvme-subsystem/*; do
      [ "$(cat "$s/subsysnqn" 2> /dev/null)" = "$1" ] || continue
      for n in "$s"/nvme*n* "$s"/nvme*/nvme*n*; do
        n=${n##*/}
        case $n in *c*n* | *"*"*) continue ;; esac # a path's node, or no match
        [ -b "/dev/$n" ] && { echo "/dev/$n"; return 0; }
      done
    done
    sleep 0.1
    t=$((t - 1))
  done
  return 1
}

# ---- the kernel's NVMe/TCP target (nvmet) ------------------------------------------------
# nullblk_dev SIZE_MB [MEMORY_BACKED=0]: makes a null_blk disk of 4 KiB blocks (with 1 it
# keeps what is written) and prints its device.
nullblk_dev() {
  modprobe null_blk nr_devices=0 || return 1
  i=0
  while [ -e /sys/kernel/config/nullb/nullb$i ]; do i=$((i + 1)); done
  d=/sys/kernel/config/nullb/nullb$i
  mkdir "$d" && echo "$1" > "$d/size" && echo 4096 > "$d/blocksize" &&
    echo "${2:-0}" > "$d/memory_backed" && echo 1 > "$d/power" || return 1
  wait_for 5 test -b /dev/nullb$i && echo /dev/nullb$i
}
nvmet_load() { modprobe nvmet && modprobe nvmet-tcp; }
# nvmet_subsys NQN: a subsystem that admits any host (attr_allow_any_host 0 restricts it).
nvmet_subsys() {
  mkdir -p "$NVMET/subsystems/$1" && echo 1 > "$NVMET/subsystems/$1/attr_allow_any_host"
}
# nvmet_ns NQN NSID DEVICE: namespace NSID of NQN on DEVICE, enabled.
nvmet_ns() {
  mkdir "$NVMET/subsystems/$1/namespaces/$2" &&
    echo -n "$3" > "$NVMET/subsystems/$1/namespaces/$2/device_path" &&
    echo 1 > "$NVMET/subsystems/$1/namespaces/$2/enable"
}
# nvmet_port ID ADDR PORT: a TCP (IPv4) port; it listens once a subsystem is linked to it.
nvmet_port() {
  p=$NVMET/ports/$1
  mkdir -p "$p" && echo tcp > "$p/addr_trtype" && echo ipv4 > "$p/addr_adrfam" &&
    echo "$2" > "$p/addr_traddr" && echo "$3" > "$p/addr_trsvcid"
}
# nvmet_link ID NQN: serves NQN on port ID (discovery too, on the same port).
nvmet_link() { ln -s "$NVMET/subsystems/$2" "$NVMET/ports/$1/subsystems/$2"; }

# wait_release PORT [SECONDS=120]: returns when something connects to guest port PORT (the
# host's "done" through run.py --hostfwd), or after SECONDS.
wait_release() { timeout "${2:-120}" nc -l -p "$1" < /dev/null > /dev/null 2>&1; }
