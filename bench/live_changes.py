#!/usr/bin/env python3
"""The data path never waits on management (issue 28): verified I/O while 1,000 live changes
are made over the management socket, against the same I/O without them.

`sens target` serves a 1 GiB RAM namespace (the I/O subsystem) and, created over its RPC
socket, a second subsystem with a null namespace (the churn subsystem); the target is pinned to
core 0. `sens perf` (pinned to core 1) runs 4 KiB randrw at QD 32 with --verify and --prefill.
In a *churn* run this script (pinned to the target's core, so the host core measures only the
host) speaks JSON-RPC 2.0 over the Unix socket itself, one request per line on one connection,
and issues --changes changes spread evenly over perf's measured window (--burst: as fast as the
target answers), cycling through:

  namespace_add (null:64M) and namespace_remove      on the churn subsystem
  host_allow and host_disallow (made-up host NQNs)   on the churn subsystem
  stats_get and stats_reset
  coalescing_set --pdus 32 / --pdus 16               on the I/O subsystem's connections
                                                     (policy and other settings kept)

A *baseline* run is the same perf run with no changes. Modes are interleaved (baseline, churn,
churn, baseline, ...) --reps times; the table gives each run and the medians: IOPS, p50 / p99 /
p99.9 completion latency, the p99 ratio churn / baseline (goal: at most 1.10), changes made,
JSON-RPC errors (every refusal counts), changes per second and the RPC round trip, perf's exit
code, I/O errors and verify failures. At the end the churn subsystem must be as it was (one
namespace, no hosts) and the I/O subsystem's coalescing back at its starting values.

Exit status: 0 when there was no I/O error, verify failure, perf failure, JSON-RPC error or
leftover state; 1 otherwise (and with --max-ratio R, also when the median p99 ratio exceeds R).
The latency percentiles are the edges of sens perf's histogram buckets, so small differences
move in steps; on a busy machine p99 is noisy, so use the ratio of medians and several --reps.

On 2 cores nothing is free for management: the target's RPC thread (with the default
--target-cpus) and this client share core 0 with the reactor, so every request, even one that
changes nothing, takes some of the reactor's time. `--ops ping` (log_get_level at the same
rate, no change) is the control that tells that cost from the changes' own; --churn-core and
--target-cpus move the client and the RPC thread.

The binary is copied to a temporary directory first, so a rebuild of build/sens during the
run does not change the program under test (or break it while it is being relinked)."""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
IO_NQN = "nqn.2026-11.io.sens-target:ram0"
CHURN_NQN = "nqn.2026-12.io.sens-bench:churn"
CHURN_NS = "null:1G"
# One cycle of changes; the pairs undo each other, so every full cycle leaves the state as it was.
CYCLE = ["namespace_add", "host_allow", "stats_get", "coalescing_set_hi",
         "namespace_remove", "host_disallow", "stats_reset", "coalescing_set_lo"]
# --ops picks kinds of change; "ping" (log_get_level, which changes nothing) is for a control
# run: the same RPC traffic without changes.
OPS = {"namespace": ["namespace_add", "namespace_remove"],
       "host": ["host_allow", "host_disallow"],
       "stats": ["stats_get", "stats_reset"],
       "coalescing": ["coalescing_set_hi", "coalescing_set_lo"],
       "ping": ["ping"]}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_binary(src, work, wait_s=300):
    """Copies src into work once it exists and runs (it may be missing or half-written while a
    build relinks it); retries for up to wait_s seconds."""
    dst = os.path.join(work, "sens")
    deadline = time.time() + wait_s
    last = "missing"
    while time.time() < deadline:
        if os.path.exists(src):
            try:
                st = os.stat(src)
                if time.time() - st.st_mtime > 2:  # not being written right now
                    shutil.copy2(src, dst)
                    r = subprocess.run([dst, "target", "--help"], capture_output=True, timeout=20)
                    if r.returncode == 0 and os.stat(src).st_mtime == st.st_mtime:
                        return dst
                    last = f"`sens target --help` exited {r.returncode}"
                else:
                    last = "being written"
            except (OSError, subprocess.SubprocessError) as e:
                last = str(e)
        print(f"live_changes: waiting for {src} ({last})", file=sys.stderr)
        time.sleep(5)
    sys.exit(f"live_changes: no usable {src} after {wait_s} s ({last})")


class Rpc:
    """JSON-RPC 2.0 over the target's Unix socket: one request per line, one answer line back."""

    def __init__(self, path, timeout=30):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.file = self.sock.makefile("rb")
        self.next_id = 0

    def call(self, method, **params):
        """Returns (result, error): error is the JSON-RPC error object, or None."""
        self.next_id += 1
        req = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params:
            req["params"] = params
        self.sock.sendall(json.dumps(req).encode() + b"\n")
        line = self.file.readline()
        if not line:
            raise ConnectionError("the target closed the RPC socket")
        resp = json.loads(line)
        if resp.get("id") != self.next_id:
            return None, {"code": None, "message": f"answer to id {resp.get('id')}, "
                                                   f"expected {self.next_id}"}
        return resp.get("result"), resp.get("error")

    def close(self):
        self.file.close()
        self.sock.close()


def wait_rpc(path, target, timeout=20):
    """The socket opens once the target serves; framework_wait_init confirms it."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if target.poll() is not None:
            raise RuntimeError(f"sens target exited with {target.returncode}")
        if os.path.exists(path):
            try:
                r = Rpc(path)
                res, err = r.call("framework_wait_init")
                r.close()
                if err is None and res and res.get("ready"):
                    return
            except OSError:
                pass
        time.sleep(0.1)
    raise RuntimeError(f"no answer on {path} within {timeout} s")


class Churn:
    """Issues the changes from its own thread once start() is called."""

    def __init__(self, sock_path, count, duration, burst, pdus_lo, pdus_hi, cycle):
        self.cycle = cycle
        self.sock_path, self.count, self.duration, self.burst = sock_path, count, duration, burst
        self.pdus_lo, self.pdus_hi = pdus_lo, pdus_hi
        self.issued = 0
        self.errors = []  # (method, error object)
        self.latencies = []  # seconds per call
        self.calls = []  # (method, start in seconds from the first change, seconds taken)
        self.t_first = self.t_last = None
        self.exception = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.go = threading.Event()

    def start(self):
        self.thread.start()

    def _took(self, name, t0):
        took = time.monotonic() - t0
        self.latencies.append(took)
        self.calls.append((name, t0 - self.t_first, took))

    def _call(self, rpc, name, **params):
        t0 = time.monotonic()
        _, err = rpc.call(name, **params)
        self._took(name, t0)
        self.issued += 1
        if err is not None:
            self.errors.append((name, err))
        return err

    def _run(self):
        try:
            rpc = Rpc(self.sock_path)
        except OSError as e:
            self.exception = e
            return
        added = []  # nsids added and not yet removed
        hosts = []  # host NQNs allowed and not yet disallowed
        retuned_hi = False  # the last retune was the one up
        try:
            self.go.wait()
            start = time.monotonic()
            self.t_first = start
            interval = 0 if self.burst or self.count <= 0 else self.duration / self.count
            for i in range(self.count):
                due = start + i * interval
                now = time.monotonic()
                if due > now:
                    time.sleep(due - now)
                op = self.cycle[i % len(self.cycle)]
                if op == "namespace_add":
                    t0 = time.monotonic()
                    res, err = rpc.call("namespace_add", nqn=CHURN_NQN, spec="null:64M")
                    self._took("namespace_add", t0)
                    self.issued += 1
                    if err is not None:
                        self.errors.append(("namespace_add", err))
                    else:
                        added.append(res["nsid"] if isinstance(res, dict) else res)
                elif op == "namespace_remove":
                    if added:
                        self._call(rpc, "namespace_remove", nqn=CHURN_NQN, nsid=added.pop())
                    else:  # the add was refused: nothing to remove; still one change
                        self._call(rpc, "stats_get")
                elif op == "host_allow":
                    host = f"nqn.2014-08.org.nvmexpress:uuid:{uuid.uuid4()}"
                    if self._call(rpc, "host_allow", nqn=CHURN_NQN, host=host) is None:
                        hosts.append(host)
                elif op == "host_disallow":
                    if hosts:
                        self._call(rpc, "host_disallow", nqn=CHURN_NQN, host=hosts.pop())
                    else:
                        self._call(rpc, "stats_get")
                elif op == "ping":
                    self._call(rpc, "log_get_level")
                elif op == "stats_get":
                    self._call(rpc, "stats_get")
                elif op == "stats_reset":
                    self._call(rpc, "stats_reset")
                elif op == "coalescing_set_hi":
                    self._call(rpc, "coalescing_set", nqn=IO_NQN, pdus=self.pdus_hi)
                    retuned_hi = True
                elif op == "coalescing_set_lo":
                    self._call(rpc, "coalescing_set", nqn=IO_NQN, pdus=self.pdus_lo)
                    retuned_hi = False
            self.t_last = time.monotonic()
            # A count that is not a whole number of cycles leaves some changes to undo; these
            # are not counted as changes, but a refusal is still an error.
            for nsid in added:
                _, err = rpc.call("namespace_remove", nqn=CHURN_NQN, nsid=nsid)
                if err is not None:
                    self.errors.append(("namespace_remove (cleanup)", err))
            for host in hosts:
                _, err = rpc.call("host_disallow", nqn=CHURN_NQN, host=host)
                if err is not None:
                    self.errors.append(("host_disallow (cleanup)", err))
            if retuned_hi:
                _, err = rpc.call("coalescing_set", nqn=IO_NQN, pdus=self.pdus_lo)
                if err is not None:
                    self.errors.append(("coalescing_set (cleanup)", err))
        except Exception as e:  # noqa: BLE001 - reported as a failed run
            self.exception = e
        finally:
            rpc.close()


def percentiles(clat):
    p = clat.get("percentile", {})

    def at(q):
        for k, v in p.items():
            if abs(float(k) - q) < 1e-6:
                return v / 1e3
        return float("nan")
    return at(50.0), at(99.0), at(99.9)


def run_perf(a, sens, port, work, mode, rep, sock_path):
    out_json = os.path.join(work, f"perf-{mode}-{rep}.json")
    trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{IO_NQN}"
    # stdbuf -oL: perf's "prefill: ... written" line arrives when the prefill ends, which is
    # when the warm-up (then the measured window) starts.
    cmd = ["taskset", "-c", str(a.host_core), "stdbuf", "-oL", sens, "perf", "-r", trid,
           "--rw", "randrw", "--bs", a.bs, "--qd", str(a.qd), "--time", str(a.time),
           "--warmup", str(a.warmup), "--size", a.size, "--verify", "--prefill",
           "--json", out_json]
    churn = None
    if mode == "churn":
        churn = Churn(sock_path, a.changes, a.time * a.spread, a.burst, a.pdus_lo, a.pdus_hi,
                      a.cycle)
        churn.start()
    lines = []
    t_launch = time.monotonic()
    perf = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t_window = None
    try:
        for line in perf.stdout:
            lines.append(line.rstrip("\n"))
            if t_window is None and line.startswith("prefill:"):
                t_window = time.monotonic() + a.warmup
                if churn:
                    # Start the changes when the measured window starts.
                    delay = t_window - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    churn.go.set()
        rc = perf.wait(timeout=a.time + 300)
    finally:
        if perf.poll() is None:
            perf.kill()
            perf.wait()
        if churn:
            churn.go.set()  # never started (no prefill line): let the thread run and end
            churn.thread.join(timeout=120)
    run = {"mode": mode, "rep": rep, "perf_exit": rc, "iops": float("nan"),
           "p50_us": float("nan"), "p99_us": float("nan"), "p999_us": float("nan"),
           "io_errors": None, "verify_failures": None, "first_error": ""}
    try:
        with open(out_json) as f:
            j = json.load(f)
        run["iops"] = j["iops"]
        run["p50_us"], run["p99_us"], run["p999_us"] = percentiles(j["clat_ns"])
        run["io_errors"] = j.get("errors")
        run["first_error"] = j.get("first_error", "")
        v = j.get("verify", {})
        run["verify_failures"] = v.get("failures")
        run["blocks_checked"] = v.get("blocks_checked")
        run["runtime_s"] = j.get("runtime_s")
    except (OSError, ValueError, KeyError) as e:
        run["first_error"] = f"no perf report: {e}"
    # perf's line per second of the run: where in the window a stall was
    run["progress"] = [ln for ln in lines if ln.startswith("[")]
    if rc != 0:
        run["perf_output"] = lines[-20:]
    if churn:
        lat = sorted(churn.latencies)
        span = (churn.t_last - churn.t_first) if churn.t_first and churn.t_last else 0
        run.update({
            "changes": churn.issued,
            "rpc_errors": len(churn.errors),
            "rpc_error_samples": [f"{m}: {e.get('message', e)}" for m, e in churn.errors[:5]],
            "churn_exception": repr(churn.exception) if churn.exception else None,
            "changes_per_s": churn.issued / span if span > 0 else float("nan"),
            "rpc_p50_ms": 1e3 * lat[len(lat) // 2] if lat else float("nan"),
            "rpc_p99_ms": 1e3 * lat[min(len(lat) - 1, int(len(lat) * 0.99))] if lat
            else float("nan"),
            "rpc_max_ms": 1e3 * lat[-1] if lat else float("nan"),
            "rpc_slowest": [{"method": m, "at_s": round(at + (churn.t_first - t_window), 3)
                             if t_window else None, "ms": round(1e3 * took, 2)}
                            for m, at, took in sorted(churn.calls, key=lambda c: -c[2])[:5]],
            # Where the changes fell relative to the measured window (seconds from its start).
            "churn_from_s": (churn.t_first - t_window) if churn.t_first and t_window else None,
            "churn_to_s": (churn.t_last - t_window) if churn.t_last and t_window else None,
        })
    else:
        run.update({"changes": 0, "rpc_errors": 0})
    run["setup_s"] = (t_window - t_launch) if t_window else None
    return run


def check_state(sock_path, start_coalescing):
    """Problems left by the churn: namespaces or hosts on the churn subsystem, or coalescing
    settings of the I/O subsystem that differ from those at the start."""
    problems = []
    rpc = Rpc(sock_path)
    try:
        res, err = rpc.call("subsystem_list", nqn=CHURN_NQN)
        if err:
            problems.append(f"subsystem_list: {err.get('message')}")
        else:
            sub = res[0]
            nss = [n["nsid"] for n in sub.get("namespaces", [])]
            if nss != [1]:
                problems.append(f"churn subsystem namespaces {nss}, expected [1]")
            if sub.get("allowed_hosts") or sub.get("hosts_with_keys"):
                problems.append(f"churn subsystem hosts left: {sub.get('allowed_hosts')}")
        res, err = rpc.call("coalescing_get", nqn=IO_NQN)
        if err:
            problems.append(f"coalescing_get: {err.get('message')}")
        elif res != start_coalescing:
            problems.append(f"coalescing {res}, expected {start_coalescing}")
    finally:
        rpc.close()
    return problems


def med(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None and r[key] == r[key]]
    return statistics.median(vals) if vals else float("nan")


def fmt(v, spec):
    return "-" if v is None or v != v else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sens", default=os.path.join(ROOT, "build", "sens"))
    ap.add_argument("--time", type=float, default=10, help="measured seconds per perf run")
    ap.add_argument("--warmup", type=float, default=0.5, help="perf warm-up seconds")
    ap.add_argument("--reps", type=int, default=3, help="runs of each mode, interleaved")
    ap.add_argument("--changes", type=int, default=1000, help="changes per churn run")
    ap.add_argument("--spread", type=float, default=0.9,
                    help="fraction of the measured window the changes are spread over")
    ap.add_argument("--burst", action="store_true",
                    help="issue the changes as fast as the target answers, not spread out")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: --time 2 --reps 1 --changes 100")
    ap.add_argument("--ops", default="namespace,host,stats,coalescing",
                    help="kinds of change, comma-separated: namespace, host, stats, coalescing;"
                         " 'ping' (log_get_level, no change) makes a control run")
    ap.add_argument("--bs", default="4k")
    ap.add_argument("--qd", type=int, default=32)
    ap.add_argument("--size", default="256M", help="region of the RAM namespace exercised")
    ap.add_argument("--pdus-lo", type=int, default=16, help="B of the retune down (the default)")
    ap.add_argument("--pdus-hi", type=int, default=32, help="B of the retune up")
    ap.add_argument("--target-core", type=int, default=0)
    ap.add_argument("--host-core", type=int, default=1)
    ap.add_argument("--target-cpus", default=None,
                    help="taskset list of the whole target process (default: the target core;"
                         " its reactor is pinned there by --pin either way, its RPC thread"
                         " runs where this allows)")
    ap.add_argument("--churn-core", type=int, default=None,
                    help="core of this script's RPC client (default: the target's core)")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--max-ratio", type=float, default=None,
                    help="also fail when the median p99 churn/baseline ratio exceeds this")
    ap.add_argument("--json", default=None, help="write the runs and the summary here")
    a = ap.parse_args()
    if a.quick:
        a.time, a.reps, a.changes = 2, 1, 100
    kinds = [k.strip() for k in a.ops.split(",") if k.strip()]
    if not kinds or any(k not in OPS for k in kinds):
        ap.error(f"--ops: choose from {', '.join(OPS)}")
    # Keep the order of the full cycle: every change comes before the one undoing it.
    a.cycle = [op for op in CYCLE + ["ping"] if any(op in OPS[k] for k in kinds)]
    churn_core = a.target_core if a.churn_core is None else a.churn_core
    try:
        os.sched_setaffinity(0, {churn_core})
    except OSError as e:
        print(f"live_changes: cannot pin to core {churn_core}: {e}", file=sys.stderr)

    work = tempfile.mkdtemp(prefix="sens-live-changes-")
    sens = copy_binary(a.sens, work)
    port = a.port or free_port()
    sock_path = os.path.join(work, "rpc.sock")
    log_path = os.path.join(work, "target.log")
    log = open(log_path, "w")
    target = subprocess.Popen(
        ["taskset", "-c", a.target_cpus or str(a.target_core), sens, "target", "--listen", f"127.0.0.1:{port}",
         "--discovery-port", "0", "--nqn", IO_NQN, "--ns", "ram:1G", "--rpc", sock_path,
         "--pin", str(a.target_core), "--cores", "1", "-q"],
        stdout=log, stderr=subprocess.STDOUT)
    runs = []
    problems = []
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    load_before = os.getloadavg()
    try:
        wait_rpc(sock_path, target)
        rpc = Rpc(sock_path)
        _, err = rpc.call("subsystem_create", nqn=CHURN_NQN, namespaces=[CHURN_NS])
        if err:
            raise RuntimeError(f"subsystem_create refused: {err.get('message')}")
        start_coalescing, err = rpc.call("coalescing_get", nqn=IO_NQN)
        if err:
            raise RuntimeError(f"coalescing_get refused: {err.get('message')}")
        rpc.close()
        if start_coalescing.get("pdus") != a.pdus_lo:
            print(f"live_changes: the I/O subsystem starts at pdus {start_coalescing.get('pdus')}"
                  f", not --pdus-lo {a.pdus_lo}", file=sys.stderr)
        for rep in range(a.reps):
            order = ["baseline", "churn"] if rep % 2 == 0 else ["churn", "baseline"]
            for mode in order:
                if target.poll() is not None:
                    raise RuntimeError(f"sens target exited with {target.returncode}")
                r = run_perf(a, sens, port, work, mode, rep, sock_path)
                runs.append(r)
                print(f"  {mode:8} rep {rep}: {fmt(r['iops'] / 1e3, '.1f')} kIOPS, p99 "
                      f"{fmt(r['p99_us'], '.1f')} us, perf exit {r['perf_exit']}, I/O errors "
                      f"{r['io_errors']}, verify failures {r['verify_failures']}"
                      + (f", {r['changes']} changes ({r['rpc_errors']} refused) at "
                         f"{fmt(r['changes_per_s'], '.0f')}/s" if mode == "churn" else ""),
                      file=sys.stderr)
                if mode == "churn":
                    problems += [f"churn rep {rep}: {p}" for p in check_state(sock_path,
                                                                             start_coalescing)]
        if target.poll() is not None:
            problems.append(f"sens target exited with {target.returncode}")
    except Exception as e:  # noqa: BLE001 - reported, then the target is stopped
        problems.append(f"aborted: {e}")
    finally:
        if target.poll() is None:
            target.send_signal(signal.SIGINT)
            try:
                target.wait(timeout=15)
            except subprocess.TimeoutExpired:
                target.kill()
                target.wait()
                problems.append("sens target did not stop on SIGINT")
        log.close()
    load_after = os.getloadavg()

    base = [r for r in runs if r["mode"] == "baseline"]
    churn = [r for r in runs if r["mode"] == "churn"]
    for r in runs:
        if r["perf_exit"] != 0:
            problems.append(f"{r['mode']} rep {r['rep']}: sens perf exited {r['perf_exit']}: "
                            f"{r['first_error'] or ' | '.join(r.get('perf_output', [])[-3:])}")
        if r["io_errors"]:
            problems.append(f"{r['mode']} rep {r['rep']}: {r['io_errors']} I/O errors "
                            f"(first: {r['first_error']})")
        if r["verify_failures"]:
            problems.append(f"{r['mode']} rep {r['rep']}: {r['verify_failures']} verify failures")
        if r["rpc_errors"]:
            problems.append(f"churn rep {r['rep']}: {r['rpc_errors']} JSON-RPC errors, e.g. "
                            + "; ".join(r["rpc_error_samples"]))
        if r.get("churn_exception"):
            problems.append(f"churn rep {r['rep']}: the RPC client failed: "
                            f"{r['churn_exception']}")
        if r["mode"] == "churn" and r["changes"] != a.changes:
            problems.append(f"churn rep {r['rep']}: {r['changes']} changes, not {a.changes}")

    ratio = med(churn, "p99_us") / med(base, "p99_us") if base and churn else float("nan")
    # Each rep's churn run against its neighbouring baseline run: drift of a shared machine
    # hits both runs of a pair alike, so the median of these ratios is the steadier figure.
    pairs = [c["p99_us"] / b["p99_us"] for b in base for c in churn
             if b["rep"] == c["rep"] and b["p99_us"] == b["p99_us"] and c["p99_us"] == c["p99_us"]]
    pair_ratio = statistics.median(pairs) if pairs else float("nan")
    print(f"sens live changes (issue 28): {started}, {os.cpu_count()} cores, target on core "
          f"{a.target_core} (process on {a.target_cpus or a.target_core}), sens perf on core {a.host_core}, RPC client on core {churn_core}; "
          f"randrw {a.bs} QD {a.qd} verify, {a.time:g} s measured per run, {a.reps} x each mode "
          f"interleaved, {a.changes} changes per churn run "
          f"({'burst' if a.burst else f'spread over {a.spread * a.time:g} s'}; {a.ops}); "
          f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after")
    print()
    print("| mode | rep | kIOPS | p50 us | p99 us | p99.9 us | changes | RPC errors | changes/s | "
          "RPC p50 / p99 / max ms | churn window s | perf exit | I/O errors | verify failures |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in runs:
        c = r["mode"] == "churn"
        window = (f"{r['churn_from_s']:.2f}..{r['churn_to_s']:.2f}"
                  if c and r.get("churn_from_s") is not None and r.get("churn_to_s") is not None
                  else "-")
        print(f"| {r['mode']} | {r['rep']} | {fmt(r['iops'] / 1e3, '.1f')} | "
              f"{fmt(r['p50_us'], '.1f')} | {fmt(r['p99_us'], '.1f')} | "
              f"{fmt(r['p999_us'], '.1f')} | {r['changes']} | {r['rpc_errors']} | "
              + (f"{fmt(r['changes_per_s'], '.0f')} | {fmt(r['rpc_p50_ms'], '.2f')} / "
                 f"{fmt(r['rpc_p99_ms'], '.2f')} / {fmt(r['rpc_max_ms'], '.2f')} | {window} | "
                 if c else "- | - | - | ")
              + f"{r['perf_exit']} | {r['io_errors']} | {r['verify_failures']} |")
    for r in churn:
        if r.get("rpc_slowest"):
            print(f"churn rep {r['rep']}: slowest changes (s from the window's start, ms): "
                  + ", ".join(f"{c['method']} at {fmt(c['at_s'], '.2f')} took {c['ms']:.1f}"
                              for c in r["rpc_slowest"]))
    print()
    print("| mode (median of runs) | kIOPS | p50 us | p99 us | p99.9 us | changes | RPC errors | "
          "changes/s | I/O errors | verify failures |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rs in (("baseline", base), ("churn", churn)):
        if not rs:
            continue
        print(f"| {name} ({len(rs)}) | {fmt(med(rs, 'iops') / 1e3, '.1f')} | "
              f"{fmt(med(rs, 'p50_us'), '.1f')} | {fmt(med(rs, 'p99_us'), '.1f')} | "
              f"{fmt(med(rs, 'p999_us'), '.1f')} | {sum(r['changes'] for r in rs)} | "
              f"{sum(r['rpc_errors'] for r in rs)} | "
              f"{fmt(med(rs, 'changes_per_s'), '.0f') if name == 'churn' else '-'} | "
              f"{sum(r['io_errors'] or 0 for r in rs)} | "
              f"{sum(r['verify_failures'] or 0 for r in rs)} |")
    print()
    print(f"p99 churn / baseline: {fmt(ratio, '.3f')} (goal: at most 1.10); p99.9: "
          f"{fmt(med(churn, 'p999_us') / med(base, 'p999_us') if base and churn else None, '.3f')}"
          f"; kIOPS: {fmt(med(churn, 'iops') / med(base, 'iops') if base and churn else None, '.3f')}")
    print(f"p99 churn / baseline of each rep (runs side by side): "
          f"{', '.join(fmt(x, '.3f') for x in pairs) or '-'}; median {fmt(pair_ratio, '.3f')}")
    if a.max_ratio is not None and not ratio <= a.max_ratio:
        problems.append(f"p99 ratio {fmt(ratio, '.3f')} over --max-ratio {a.max_ratio}")
    if problems:
        print("\nPROBLEMS:")
        for p in problems:
            print(f"  {p}")
        try:
            tail = open(log_path).read().splitlines()[-10:]
            if tail:
                print("target log (last lines):\n  " + "\n  ".join(tail))
        except OSError:
            pass
    else:
        print("no I/O error, verify failure, JSON-RPC error or leftover state")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"started": started, "args": vars(a), "load_before": load_before,
                       "load_after": load_after, "runs": runs, "p99_ratio": ratio,
                       "p99_pair_ratios": pairs, "p99_pair_ratio_median": pair_ratio,
                       "problems": problems}, f, indent=2)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
