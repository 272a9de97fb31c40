#!/usr/bin/env bash
# Runs the tests that use threads under ThreadSanitizer (a SENS_TSAN build: make tsan). Any
# TSan report fails the run, the reports of `sens` children included: they go to files in
# BUILD/tsan-logs (halt_on_error: the first race stops that process), and the run fails
# unless that folder stays empty. No suppressions: OpenSSL, liburing and the other libraries
# are not instrumented, so TSan sees none of their accesses, and what we exchange through
# the kernel (sockets, eventfds, io_uring) is handed over by the same thread that reaped it.
#
# Which tests (about 10 minutes on 2 cores, on top of the build): the binaries whose code
# runs on more than one thread, whole, and of test_integration the suites whose `sens`
# children run management (RPC, metrics: their own threads next to the reactors) and TLS. Left
# out: the single-threaded suites (wire, coalesce, model, buffers, auth, storage but its
# two-queue test, netblk), the rest of test_integration (perf, fio, ANA, tshark: the same
# reactor code the kept suites run, at 3-10x TSan's cost) and rbd (librbd's own threads are
# not instrumented).
# Usage: tests/tsan.sh BUILD [BINARY[:GTEST_FILTER] ...] (default: the list below).
set -euo pipefail
build=${1:-build-tsan}
shift || true
default_tests=(
  test_common
  test_reactor
  test_transport
  test_mgmt
  "test_storage:FileDevice.QueuePerThread"
  test_target
  # (not the one test that bounds a whole perf run's wall time: TSan's start-up alone is seconds)
  "test_host:-PerfCli.HungTargetTimesOutInsteadOfHanging"
  "test_integration:Rpc.*:RpcConfig.*:Metrics.*:TlsCut.*:TlsCli.*:GracefulStop.Answers*"
)
tests=("$@")
[ ${#tests[@]} -eq 0 ] && tests=("${default_tests[@]}")
logs="$(cd "$build" && pwd)/tsan-logs"
rm -rf "$logs"
mkdir -p "$logs"
# Children inherit this (the tests start SENS_BINARY, the TSan-built sens of this build).
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:log_path=$logs/report"
failed=()
passed=0
for t in "${tests[@]}"; do
  bin=${t%%:*}
  filter=*
  [ "$bin" != "$t" ] && filter=${t#*:}
  t0=$SECONDS
  if (cd "$build" && "./$bin" --gtest_filter="$filter" --gtest_brief=1); then
    passed=$((passed + 1))
  else
    failed+=("$bin")
  fi
  echo "tsan: $bin ($filter) took $((SECONDS - t0)) s" >&2
done
reports=$(find "$logs" -type f | sort)
if [ -n "$reports" ]; then
  for f in $reports; do
    echo "=== ThreadSanitizer report $f"
    cat "$f"
  done
  echo "tsan: $(echo "$reports" | wc -l) ThreadSanitizer report(s), see above" >&2
  exit 1
fi
echo "tsan: ${passed} passed, ${#failed[@]} failed${failed:+: ${failed[*]}}"
[ ${#failed[@]} -eq 0 ]
