#!/usr/bin/env bash
# The kernel's TLS records (kTLS, issue 31). This machine's kernel may have no `tls` module; the
# test VM's (tests/interop/vm) has one, so sens runs in the guest here: `sens` and
# `test_transport` from the host's build, with every library ldd names and the host's dynamic
# loader, through 9p (guest_sens_ktls.sh starts them with that loader). In the guest:
#  - test_transport's kernel-record tests (the kernel's records against sens's, OpenSSL's and
#    the kernel's, both suites; a peer's KeyUpdate) must run and pass, not skip;
#  - `sens target --tls-records kernel` and `sens perf --tls-records kernel --verify`: no
#    failed I/O, the header says kTLS on every connection, and the target's metrics count
#    kernel sessions only;
#  - sens's user-space records on one side and the kernel's on the other, both ways, verified;
#  - auto takes the kernel's records where the kernel has them.
# Usage: sens_in_guest_ktls.sh path/to/sens   (test_transport beside it; INTEROP_LOGS=DIR keeps
# the VM log.)
set -euo pipefail
SENS=$(realpath "${1:?usage: sens_in_guest_ktls.sh path/to/sens}")
HERE=$(cd "$(dirname "$0")" && pwd)
VMDIR=${SENS_VM_DIR:-$HERE/vm}
UNIT=$(dirname "$SENS")/test_transport
[ -x "$UNIT" ] || { echo "sens_in_guest_ktls: no $UNIT (make build makes it)"; exit 1; }
"$VMDIR/build.sh" || { echo "sens_in_guest_ktls: the test VM cannot be built (see above)" >&2; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
S=$WORK/share
mkdir -p "$S/bin" "$S/lib"
# The binaries and their libraries, flat in lib/ (the loader's --library-path).
for b in "$SENS" "$UNIT"; do
  cp "$b" "$S/bin/"
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' |
    while read -r l; do cp -L "$l" "$S/lib/"; done
done
[ -e "$S/lib/ld-linux-x86-64.so.2" ] || { echo "sens_in_guest_ktls: no x86-64 loader in ldd's list"; exit 1; }
nvme gen-tls-key --hmac=1 > "$S/psk" 2> /dev/null ||
  { echo "sens_in_guest_ktls: nvme gen-tls-key failed (nvme-cli)"; exit 1; }

cd "$HERE"
rc=0
"$VMDIR/run.py" guest_sens_ktls.sh -q --timeout 600 --file guest_common.sh --share "$S" \
  --log "$WORK/vm.log" > /dev/null || rc=$?
grep -E '@@NOTE |^\[[ 0-9.]*\] +dmesg: ' "$WORK/vm.log" | sed 's/^\[[ 0-9.]*\] //' || true
if [ $rc != 0 ]; then
  echo "---- VM log (tail)"
  tail -n 60 "$WORK/vm.log"
fi
[ -z "${INTEROP_LOGS:-}" ] || { mkdir -p "$INTEROP_LOGS"; cp "$WORK"/*.log "$INTEROP_LOGS"/; }
echo "sens_in_guest_ktls: $([ $rc = 0 ] && echo PASS || echo FAIL)"
exit $rc
