# Sourced by tests/interop/host_linux_target*.sh (bash): the Linux kernel target (nvmet-tcp) in
# the test VM (tests/interop/vm), with sens as the host. The caller sets NAME (its own name, for
# messages) and VMDIR, then calls start_linux_target; checks go through check.

# freeport: a TCP port on 127.0.0.1 that nothing listens on now.
freeport() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# start_linux_target GUEST-SCRIPT [run.py options...]: boots the VM running GUEST-SCRIPT of this
# folder, with guest_common.sh (it must print TARGET_READY once nvmet listens on guest port 4420,
# then hold until guest port 5555 is connected to) and waits until it is ready. Sets PORT (host
# port of the target), VM, LOG; the VM is released (powered off) when the calling script exits.
# Exits 2 if it never gets ready.
start_linux_target() {
  local script=$1
  shift
  "$VMDIR/build.sh" || { echo "$NAME: the test VM cannot be built (see above)" >&2; exit 2; }
  PORT=$(freeport)
  RELEASE_PORT=$(freeport)
  LOG=$(mktemp "/tmp/$NAME.XXXXXX.log")
  # (QEMU accepts on PORT at once, before nvmet listens in the guest: hence TARGET_READY.)
  "$VMDIR/run.py" "$HERE/$script" --file "$HERE/guest_common.sh" --hostfwd "$PORT:4420" \
    --hostfwd "$RELEASE_PORT:5555" --timeout 600 --log "$LOG" -q "$@" &
  VM=$!
  trap release_linux_target EXIT
  for _ in $(seq 240); do
    grep -q TARGET_READY "$LOG" 2> /dev/null && return 0
    kill -0 "$VM" 2> /dev/null || { echo "$NAME: VM exited early; log $LOG" >&2; exit 2; }
    sleep 0.5
  done
  echo "$NAME: target not ready in 120 s; log $LOG" >&2
  exit 2
}

release_linux_target() {
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $RELEASE_PORT), timeout=5).close()" \
    2> /dev/null || true
  # The guest powers off on release; do not wait forever if it does not.
  for _ in $(seq 60); do kill -0 "$VM" 2> /dev/null || break; sleep 1; done
  kill "$VM" 2> /dev/null || true
  wait "$VM" 2> /dev/null || true
  rm -f "${CHECK_OUT:-}"
}

# check NAME EXPECTED-EXIT EXPECTED-REGEX COMMAND...: runs COMMAND (300 s at most) and prints
# PASS or FAIL NAME with the reason: the exit status, a fio verify failure, or output that
# lacks EXPECTED-REGEX. A failure sets failed=1. CHECK_TAIL=N prints only the output's last N lines.
failed=0
check() {
  local name=$1 want_rc=$2 want=$3
  shift 3
  [ -n "${CHECK_OUT:-}" ] || CHECK_OUT=$(mktemp)
  echo "== $name: $*"
  timeout 300 "$@" > "$CHECK_OUT" 2>&1
  local rc=$?
  if [ -n "${CHECK_TAIL:-}" ]; then tail -n "$CHECK_TAIL" "$CHECK_OUT"; else cat "$CHECK_OUT"; fi
  if [ $rc -ne "$want_rc" ]; then
    echo "FAIL $name: exit $rc, expected $want_rc"
    failed=1
  elif grep -q "verify: bad" "$CHECK_OUT"; then
    echo "FAIL $name: fio reports a verify failure"
    failed=1
  elif ! grep -qE -- "$want" "$CHECK_OUT"; then
    echo "FAIL $name: output lacks /$want/"
    failed=1
  else
    echo "PASS $name"
  fi
}

# finish: the script's verdict line and exit status (the VM log is kept on failure).
finish() {
  if [ $failed -eq 0 ]; then
    echo "$NAME: PASS"
    rm -f "$LOG"
  else
    echo "$NAME: FAIL (VM log $LOG)"
  fi
  exit $failed
}
