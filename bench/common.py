"""What the bench scripts that run one `sens target` child share: a free port, the target
started (and waited for) and stopped, `sens perf` command lines and their JSON summary, and
the arguments every such script takes (--sens, --time, --json)."""
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NQN = "nqn.2026-11.io.sens-target:ram0"  # `sens target`'s default subsystem


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def nvme_tls_key(hmac):
    """A TLS PSK in the NVMe interchange format (`nvme gen-tls-key --hmac=1|2`), or exit."""
    out = subprocess.run(["nvme", "gen-tls-key", f"--hmac={hmac}"], capture_output=True, text=True)
    key = out.stdout.strip()
    if not key.startswith("NVMeTLSkey-1:"):
        raise SystemExit(f"nvme gen-tls-key failed (nvme-cli is needed): {out.stderr}")
    return key


def recv_exact(s, n):
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the target closed the connection")
        out += chunk
    return out


def add_common_arguments(ap, time, time_help=None):
    """--sens (the binary), --time (seconds of each run, default `time`) and --json."""
    ap.add_argument("--sens", default=os.path.join(ROOT, "build", "sens"))
    ap.add_argument("--time", type=float, default=time, help=time_help)
    ap.add_argument("--json", default=None, help="write the runs to this file")


class Target:
    """A `sens target` child on a free port of 127.0.0.1 (no discovery port, -q) with `args`,
    and a JSON-RPC socket if `rpc`; its files go in `work` (a new temporary folder named
    `prefix`... if None), on `core` if given (taskset and --pin). As a context manager: started and waited for on entry
    (RPC framework_wait_init, else until the port accepts), stopped on exit."""

    def __init__(self, sens, args, rpc=False, prefix="sens-bench-", work=None, core=None):
        self.sens = sens
        self.work = work or tempfile.mkdtemp(prefix=prefix)
        self.port = free_port()
        self.sock = os.path.join(self.work, "rpc.sock") if rpc else None
        cmd = [sens, "target", "--listen", f"127.0.0.1:{self.port}", "--discovery-port", "0",
               "-q"] + (["--rpc", self.sock] if rpc else []) + list(args)
        if core is not None:  # the whole target on that core, its reactor pinned there
            cmd = ["taskset", "-c", str(core)] + cmd + ["--pin", str(core)]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)

    def wait_ready(self):
        if self.sock:
            subprocess.run([self.sens, "rpc", "--socket", self.sock, "--wait", "10",
                            "framework_wait_init"], check=True, capture_output=True)
            return
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.1).close()
                return
            except OSError:
                time.sleep(0.05)

    def rpc(self, *args):
        """`sens rpc` on the target's socket (it must succeed): its output."""
        return subprocess.run([self.sens, "rpc", "--socket", self.sock] + list(args), check=True,
                              capture_output=True, text=True).stdout

    def stop(self, timeout=30):
        self.proc.terminate()
        self.proc.wait(timeout=timeout)

    def __enter__(self):
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


def perf_command(a, port, host, args):
    """`sens perf` against `port` as `host` for a.time seconds (0.3 s warm-up), its report as
    JSON on stdout; `args` add the workload."""
    trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN} hostnqn:{host}"
    return [a.sens, "perf", "-r", trid, "--time", str(a.time), "--warmup", "0.3", "-q", "--json",
            "-"] + list(args)


def pinned_perf(sens, port, args):
    """`sens perf` on core 1 against `port` (0.5 s warm-up), `args` the workload: its JSON
    report; exits with sens perf's message if it fails."""
    cmd = ["taskset", "-c", "1", sens, "perf", "-r",
           f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN}", "--warmup", "0.5", "-q",
           "--json", "-"] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        sys.exit(f"sens perf {' '.join(args)} failed: {r.stderr}{r.stdout}")
    return json.loads(r.stdout[r.stdout.index("{"):])


def perf_summary(out):
    """IOPS, p99 (us) and errors of a `sens perf --json -` report."""
    j = json.loads(out[out.index("{"):])
    return {"iops": j["iops"], "p99_us": j["clat_ns"]["percentile"]["99.000000"] / 1e3,
            "errors": j["errors"]}


def core_round_trip(limit, target_core=0, client_core=1):
    """How far apart the bench's two cores are now: a cache line's round trip between them in
    ns (`sens_limit --core-round-trip`). A VM's vCPUs may share a chiplet (tens of ns) or not
    (hundreds), and move between runs; loopback TCP's speed changes about 2x with it."""
    r = subprocess.run([limit, "--core-round-trip", "--target-core", str(target_core),
                        "--client-core", str(client_core), "--json", "-", "-q"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        sys.exit(f"sens_limit --core-round-trip failed: {r.stderr.strip()}")
    return json.loads(r.stdout)["core_round_trip_ns"]


def placement(round_trips, nearest, spread=2.5):
    """Where the cores were for a group of runs, from the round trips (ns) measured around
    them: "near" if all are within `spread` times `nearest` (the smallest the whole bench saw:
    near readings vary by up to 1.6x, far ones are 5-10x), "far" if all are beyond it, None if
    the placement changed in between (or is unknown). A bench that never saw the near
    placement calls its runs near: the grouping holds, the name is relative."""
    if not nearest or not round_trips or not all(round_trips):
        return None
    near = [x <= spread * nearest for x in round_trips]
    return "near" if all(near) else "far" if not any(near) else None


def by_placement(reps, nearest):
    """{"near": [...], "far": [...]}: each rep's value grouped by placement(), for reps given as
    (round trips, value); reps whose placement changed are left out."""
    out = {"near": [], "far": []}
    for round_trips, value in reps:
        where = placement(round_trips, nearest)
        if where:
            out[where].append(value)
    return out


def spread_text(values):
    """'median (low-high), n' of some ratios, or '-' for none."""
    if not values:
        return "-"
    v = sorted(values)
    return f"{statistics.median(v):.2f} ({v[0]:.2f}-{v[-1]:.2f}), {len(v)}"
