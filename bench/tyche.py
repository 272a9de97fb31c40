#!/usr/bin/env python3
"""End to end: naive vs tyche buffers (issue 12, measurement 3) at many connections.

For each workload (4 KiB random reads, 16 KiB random R2T writes) and shape (queues x QD), a
fresh `sens target` (core 0) and `sens perf` (core 1) run with --buffers naive and then
--buffers tyche on both ends, alternating, --reps times; each point is the median by IOPS.
Reports IOPS, the tyche/naive ratio, and CPU seconds per million I/Os of target and host.
The target's R2T budget is its default (from the caches) unless --receive-budget is given."""
import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

NQN = "nqn.2026-11.io.sens-target:ram0"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pin(args, core):
    """taskset to `core`; with --rt also SCHED_FIFO, so that other work on a shared machine
    (builds) does not take the benchmark's cores (the reactors sleep when idle, so they leave
    the cores to others between runs)."""
    return (["chrt", "-f", "10"] if args.rt else []) + ["taskset", "-c", str(core)]


def run(args, layout, rw, bs, queues, qd):
    port = free_port()
    stats = tempfile.mktemp(prefix="sens-tyche-", suffix=".json")
    report = tempfile.mktemp(prefix="sens-tyche-perf-", suffix=".json")
    cmd = pin(args, 0) + [args.sens, "target", "--listen", f"127.0.0.1:{port}",
           "--discovery-port", "0", "--ns", "ram:1G", "--max-io-queues", str(max(queues, 64)),
           "--buffers", layout, "--stats-json", stats, "-q"]
    if args.receive_budget:
        cmd += ["--receive-budget", args.receive_budget]
    target = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        c0 = cpu_seconds(target.pid)
        perf = subprocess.run(
            pin(args, 1) + [args.sens, "perf", "-r",
             f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN}", "--rw", rw, "--bs", bs,
             "--queues", str(queues), "--qd", str(qd), "--time", str(args.time), "--size",
             args.size, "--buffers", layout, "-q", "--json", report],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=args.time + 120)
        c1 = cpu_seconds(target.pid)
        if perf.returncode != 0:
            raise RuntimeError(f"sens perf failed: {perf.stderr.strip()}")
        j = json.load(open(report))
    finally:
        target.send_signal(signal.SIGINT)
        target.wait(timeout=30)
    pool = {}
    if os.path.exists(stats):
        pool = json.load(open(stats))["reactors"][0]["buffer_pool"]
        os.unlink(stats)
    os.unlink(report)
    ios = j["total_ios"]
    # The target's CPU covers connect and warm-up too; perf's covers its measured window.
    run_ios = ios * (j["runtime_s"] + 0.5) / j["runtime_s"]
    return {"layout": layout, "rw": rw, "bs": bs, "queues": queues, "qd": qd, "iops": j["iops"],
            "lat_avg_us": j["clat_ns"]["mean"] / 1e3,
            "target_cpu_s_per_mio": (c1 - c0) / run_ios * 1e6,
            "host_cpu_s_per_mio": (j["cpu_user_s"] + j["cpu_sys_s"]) / ios * 1e6,
            "throttled": pool.get("throttled", 0), "pages": pool.get("pages", "")}


def median_by_iops(runs):
    runs = sorted(runs, key=lambda r: r["iops"])
    return runs[len(runs) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sens", default="build/sens")
    ap.add_argument("--time", type=float, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", default="1G", help="region of the namespace exercised")
    ap.add_argument("--shapes", default="16x32,64x8,128x4")
    ap.add_argument("--receive-budget", default="")
    ap.add_argument("--rt", action="store_true", help="run both ends at SCHED_FIFO priority 10")
    ap.add_argument("--json", default="bench/out/tyche.json")
    args = ap.parse_args()
    shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
    points = []
    print(f"{'workload':<14} {'shape':>7} {'naive IOPS':>11} {'tyche IOPS':>11} {'ratio':>6}  "
          f"{'target s/MIO n/t':>17} {'host s/MIO n/t':>15}  throttled")
    for rw, bs in (("randread", "4k"), ("randwrite", "16k")):
        for q, d in shapes:
            runs = {"naive": [], "tyche": []}
            for _ in range(args.reps):
                for layout in ("naive", "tyche"):
                    runs[layout].append(run(args, layout, rw, bs, q, d))
            n, t = median_by_iops(runs["naive"]), median_by_iops(runs["tyche"])
            points.append({"naive": n, "tyche": t, "naive_runs": runs["naive"],
                           "tyche_runs": runs["tyche"]})
            print(f"{rw + ' ' + bs:<14} {q:>4}x{d:<2} {n['iops']:>11,.0f} {t['iops']:>11,.0f} "
                  f"{t['iops'] / n['iops']:>6.2f}  {n['target_cpu_s_per_mio']:>8.2f}/"
                  f"{t['target_cpu_s_per_mio']:<8.2f} {n['host_cpu_s_per_mio']:>7.2f}/"
                  f"{t['host_cpu_s_per_mio']:<7.2f}  {t['throttled']}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"time_s": args.time, "reps": args.reps, "size": args.size, "rt": args.rt,
                   "points": points},
                  f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
