#!/usr/bin/env python3
"""Reproduces the SENS paper's experiments on this machine (`make bench`).

`sens target` runs pinned to core 0 and `sens perf` to core 1. For every point of the sweep
(backend x policy x workload x concurrency) a fresh target is started, so its coalescing
counters and CPU time belong to that point alone. Results: bench/out/results.json, a CSV,
PNG plots (gnuplot) and docs/results.md (bench/report.py).
"""
import argparse
import datetime
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NQN = "nqn.2026-11.dev.sens:bench"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# name, rw, bs, rwmixread, in-capsule bytes on the target
WORKLOADS = {
    "4k-randread": ("randread", "4k", None, 8192),
    "4k-randwrite": ("randwrite", "4k", None, 8192),
    "16k-randwrite-r2t": ("randwrite", "16k", None, 4096),  # every write needs an R2T
    "16k-randread": ("randread", "16k", None, 8192),
    "4k-randrw-90": ("randrw", "4k", 90, 8192),
    "4k-randrw-50": ("randrw", "4k", 50, 8192),
    "16k-randrw-90": ("randrw", "16k", 90, 4096),
    "16k-randrw-50": ("randrw", "16k", 50, 4096),
}
POLICIES = ["off", "uniform", "semantic"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_cpu(pid):
    """(user, system) CPU seconds of a process, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def proc_ctx(pid):
    """Voluntary + involuntary context switches of all threads of a process."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


class Target:
    def __init__(self, sens, backend, policy, inline, workdir, cores):
        self.port = free_port()
        self.stats = os.path.join(workdir, f"stats-{self.port}.json")
        self.log = open(os.path.join(workdir, f"target-{self.port}.log"), "w")
        ns = "ram:1G" if backend == "ram" else f"file:{os.path.join(workdir, 'ns.img')}"
        cmd = ["taskset", "-c", cores, sens, "target", "--listen", f"127.0.0.1:{self.port}",
               "--discovery-port", "0", "--nqn", NQN, "--ns", ns, "--coalesce", policy,
               "--inline-data", str(inline), "--stats-json", self.stats, "-q"]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        else:
            raise RuntimeError(f"target did not start: {cmd}")

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)
        self.log.close()
        with open(self.stats) as f:
            return json.load(f)


def run_point(args, backend, policy, wl, queues, qd):
    rw, bs, mix, inline = WORKLOADS[wl]
    cores = "0" if os.cpu_count() >= 2 else "0"
    perf_core = "1" if os.cpu_count() >= 2 else "0"
    t = Target(args.sens, backend, policy, inline, args.workdir, cores)
    out = os.path.join(args.workdir, "perf.json")
    cmd = ["taskset", "-c", perf_core, args.sens, "perf", "-r",
           f"trtype:tcp traddr:127.0.0.1 trsvcid:{t.port} subnqn:{NQN}", "--rw", rw,
           "--bs", bs, "--qd", str(qd), "--queues", str(queues), "--time", str(args.time),
           "--coalesce", policy, "--json", out, "--size", "256M", "-q"]
    if mix is not None:
        cmd += ["--rwmixread", str(mix)]
    cpu0, ctx0 = proc_cpu(t.proc.pid), proc_ctx(t.proc.pid)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.time + 60)
    cpu1, ctx1 = proc_cpu(t.proc.pid), proc_ctx(t.proc.pid)
    stats = t.stop()
    if r.returncode != 0:
        print(f"  perf failed ({r.returncode}): {r.stderr.strip()[:300]}", file=sys.stderr)
        return None
    with open(out) as f:
        perf = json.load(f)
    job = perf
    ios = job["total_ios"]
    mio = max(ios, 1) / 1e6
    point = {
        "backend": backend, "policy": policy, "workload": wl, "queues": queues, "qd": qd,
        "concurrency": queues * qd, "iops": job["iops"], "mib_s": job["bw_bytes"] / 2**20,
        "lat_avg_us": job["clat_ns"]["mean"] / 1e3,
        "lat_p50_us": job["clat_ns"]["percentile"]["50.000000"] / 1e3,
        "lat_p99_us": job["clat_ns"]["percentile"]["99.000000"] / 1e3,
        "target_usr_s_per_mio": (cpu1[0] - cpu0[0]) / mio,
        "target_sys_s_per_mio": (cpu1[1] - cpu0[1]) / mio,
        "host_usr_s_per_mio": job["cpu_user_s"] / mio,
        "host_sys_s_per_mio": job["cpu_sys_s"] / mio,
        "target_ctx_per_mio": (ctx1 - ctx0) / mio,
        "host_ctx_per_mio": job["ctx"] / mio,
        "target_send_calls_per_io": stats["send_calls"] / max(ios, 1),
        "host_send_calls_per_io": job["syscalls"]["send_per_io"],
        "host_recv_calls_per_io": job["syscalls"]["recv_per_io"],
        "target_pdus_per_flush": stats["pdus_per_flush"]["mean"],
        "target_flushes": stats["flushes"],
        "r2t_delay_us": stats["r2t_delay_us"],
        "host_coalesce": job.get("coalesce"),
        "total_ios": ios,
        "runtime_s": job["runtime_s"],
        "target_pdus_sent": stats["pdus_sent"],
    }
    return point


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sens", default=os.path.join(ROOT, "build", "sens"))
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--quick", action="store_true", help="a reduced sweep, under 3 minutes")
    ap.add_argument("--time", type=float, default=None, help="seconds per point")
    ap.add_argument("--backends", default=None, help="comma list: ram,file")
    ap.add_argument("--workloads", default=None, help="comma list of " + ",".join(WORKLOADS))
    ap.add_argument("--policies", default=None)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    if args.quick:
        backends, workloads = ["ram"], ["4k-randread", "16k-randwrite-r2t"]
        concurrency, qd1 = [(1, 32), (16, 32)], [(1, 1)]
        args.time = args.time or 2
    else:
        backends, workloads = ["ram", "file"], list(WORKLOADS)
        concurrency, qd1 = [(q, 32) for q in (1, 2, 4, 8, 16)], [(1, 1)]
        args.time = args.time or 3
    if args.backends:
        backends = args.backends.split(",")
    if args.workloads:
        workloads = args.workloads.split(",")
    policies = args.policies.split(",") if args.policies else POLICIES
    with tempfile.TemporaryDirectory(prefix="sens-bench-", dir="/var/tmp") as work:
        args.workdir = work
        if "file" in backends:
            with open(os.path.join(work, "ns.img"), "wb") as f:
                f.truncate(1 << 30)
        points = []
        # Moderate concurrency for the R2T writes, where groups fill by timer rather than by
        # capacity: the regime the semantic policy is for.
        moderate = [] if args.quick else [(1, 8), (2, 8), (4, 8), (4, 16)]
        file_workloads = ("4k-randread", "4k-randwrite", "16k-randwrite-r2t")
        plan = []
        for b in backends:
            for w in workloads:
                if b == "file" and w not in file_workloads and not args.quick:
                    continue
                points_here = qd1 + concurrency + (moderate if "write" in w else [])
                plan += [(b, p, w, q, d) for (q, d) in points_here for p in policies]
        t0 = time.time()
        for i, (b, p, w, q, d) in enumerate(plan, 1):
            pt = run_point(args, b, p, w, q, d)
            if pt:
                points.append(pt)
                print(f"[{i}/{len(plan)} {time.time() - t0:5.0f}s] {b:4} {w:18} {p:8} {q:2}x{d:<2} "
                      f"{pt['iops']:9.0f} IOPS {pt['lat_avg_us']:8.1f} us avg "
                      f"target {pt['target_usr_s_per_mio'] + pt['target_sys_s_per_mio']:6.2f} "
                      f"s/MIO  {pt['target_send_calls_per_io']:.2f} sends/IO", flush=True)
    idle = subprocess.run([sys.executable, os.path.join(HERE, "idle.py"), "--sens", args.sens,
                           "--seconds", "3" if args.quick else "10"], capture_output=True, text=True)
    print(idle.stdout.strip())
    meta = {
        "idle": idle.stdout.strip(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                     if l.startswith("model name")), platform.processor()),
        "cores": os.cpu_count(), "kernel": platform.release(), "quick": args.quick,
        "seconds_per_point": args.time, "command": " ".join(sys.argv),
    }
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "points": points}, f, indent=1)
    subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "--in",
                    os.path.join(args.out, "results.json"), "--out", args.out, "--sens", args.sens]
                   + ([] if args.quick else ["--docs", os.path.join(ROOT, "docs", "results.md")]),
                   check=True)


if __name__ == "__main__":
    main()
