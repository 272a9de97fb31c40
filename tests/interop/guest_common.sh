# Sourced by the guest scripts of tests/interop (busybox sh in the linuxvm guest, which
# gets this file with `run.sh --file guest_common.sh`, at /files/guest_common.sh).
# Every step prints "@@NOTE STEP <name> ok|FAIL rc=N"; $fails counts the failed ones.
. /lib/nvmet.sh
ADDR=10.0.2.100
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
