# In the test VM (sens_in_guest_ktls.sh): sens with the kernel's TLS records. /host holds bin/
# (sens, test_transport), lib/ (their libraries and the loader) and psk.
. /files/guest_common.sh
LD="/host/lib/ld-linux-x86-64.so.2 --library-path /host/lib"  # (the host's loader and libraries)
run() { $LD "$@"; }
sens() { $LD /host/bin/sens "$@"; }
note "kernel $(uname -r)"

# 1. The unit tests of the kernel's records: they skip where the kernel has no tls module,
#    which here would be a failure.
run /host/bin/test_transport --gtest_filter='*TlsKernelRecords*' > /tmp/unit.log 2>&1
rc=$?
grep -E '^\[ +(OK|FAILED|SKIPPED) +\] [A-Za-z]' /tmp/unit.log | sed 's/^/  /'
n=$(grep -cE '^\[ +OK +\] [A-Za-z]' /tmp/unit.log)
if grep -qE '^\[ +SKIPPED +\] [A-Za-z]' /tmp/unit.log || [ "$n" -lt 11 ]; then
  grep -A3 -E 'Skipped|Failure' /tmp/unit.log | head -20
  rc=1
fi
[ $rc = 0 ] || tail -n 30 /tmp/unit.log
note "tcp_available_ulp: $(cat /proc/sys/net/ipv4/tcp_available_ulp)"
step unit-kernel-records $rc

# 2. Targets: kernel records on 4421, sens's on 4423, each with metrics. (Started without the
#    function, so that $! is the target itself.)
$LD /host/bin/sens target --tls-listen 127.0.0.1:4421 --listen 127.0.0.1:4420 --tls /host/psk \
  --discovery-port 0 --ns ram:64M --tls-records kernel --metrics 127.0.0.1:9101 --rpc /tmp/tk.sock -v \
  > /tmp/tk.log 2>&1 &
TK=$!
$LD /host/bin/sens target --tls-listen 127.0.0.1:4423 --listen 127.0.0.1:4422 --tls /host/psk \
  --discovery-port 0 --ns ram:64M --tls-records sens --metrics 127.0.0.1:9102 > /tmp/ts.log 2>&1 &
TS=$!
wait_for 30 grep -q "I/O, TLS 1.3" /tmp/tk.log && wait_for 30 grep -q "I/O, TLS 1.3" /tmp/ts.log
rc=$?
grep "TLS 1.3" /tmp/tk.log /tmp/ts.log | sed 's/^/  /'
step targets-up $rc
# The second target has no --rpc, and the default socket's directory (/var/tmp) does not exist
# here: it serves without management and says so.
grep -q "/var/tmp/sens.sock: No such file or directory: this target has no management socket" \
  /tmp/ts.log
rc=$?
[ $rc = 0 ] || cat /tmp/ts.log
step default-rpc-path-missing-is-a-warning $rc

# perf_run NAME PORT RECORDS WANT [ARGS...]: a verified run whose header must contain WANT.
perf_run() {
  name=$1 port=$2 records=$3 want=$4
  shift 4
  sens perf -r "trtype:tcp traddr:127.0.0.1 trsvcid:$port subnqn:$NQN" --tls /host/psk \
    --tls-records "$records" --rw randrw --bs 16k --qd 8 --time 2 --verify -q "$@" \
    > /tmp/p.log 2>&1
  r=$?
  grep -E '^TLS 1.3|IOPS|failed' /tmp/p.log | sed "s/^/  $name: /"
  grep -q " 0 failed" /tmp/p.log || r=1
  grep -qF "$want" /tmp/p.log || { echo "  $name: no '$want' in the header"; r=1; }
  [ $r = 0 ] || tail -n 15 /tmp/p.log
  step "$name" $r
}
NQN=$(sed -n 's/^subsystem \([^ ]*\).*/\1/p' /tmp/tk.log | head -n 1)
perf_run kernel-to-kernel 4421 kernel "by the kernel (kTLS) on 1 of 1"
perf_run kernel-to-kernel-digests 4421 kernel "by the kernel (kTLS) on 2 of 2" --queues 2 \
  --hdr-digest --data-digest
perf_run sens-to-kernel 4421 sens "by sens with AES-GCM"
perf_run kernel-to-sens 4423 kernel "by the kernel (kTLS) on 1 of 1"
perf_run auto-to-sens 4423 auto "by the kernel (kTLS) on 1 of 1"

# 3. The target's metrics: every session on 4421 by the kernel's records, on 4423 by sens's.
m=$(wget -qO- http://127.0.0.1:9101/metrics | grep '^sens_tls_sessions_total')
echo "$m" | sed 's/^/  kernel target: /'
echo "$m" | grep -q 'records="kernel",aes_gcm="kernel"} [1-9]' &&
  ! echo "$m" | grep -qE 'records="(sens|openssl)".*} [1-9]'
step metrics-kernel-sessions $?
m=$(wget -qO- http://127.0.0.1:9102/metrics | grep '^sens_tls_sessions_total')
echo "$m" | sed 's/^/  sens target: /'
echo "$m" | grep -q 'records="sens",.*} [1-9]' && ! echo "$m" | grep -qE 'records="kernel".*} [1-9]'
step metrics-sens-sessions $?

for t in "$TK tk" "$TS ts"; do
  set -- $t
  kill -0 $1 2> /dev/null || { note "target $2 is gone"; tail -n 20 /tmp/$2.log; }
done
kill -TERM $TK $TS  # (not INT: a non-interactive shell starts background jobs with SIGINT ignored)
wait $TK
step target-kernel-exit $?
wait $TS
step target-sens-exit $?
grep -iE "error|fail" /tmp/tk.log | grep -v "0 failed" | head -5 | sed 's/^/  target log: /'
note "FAILURES $fails"
exit $fails
