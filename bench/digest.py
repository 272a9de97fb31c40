#!/usr/bin/env python3
"""What NVMe/TCP digests cost: `sens perf` against `sens target` on a RAM namespace with no
digests, header digests only, and header + data digests (CRC32C), for 4 KiB random reads and
writes at QD 32 (throughput) and QD 1 (latency), one queue. The target is pinned to core 0 and
the host to core 1; runs alternate (none, header, header+data, none, ...) so that the drift of
a shared machine hits every mode alike, and the median of --reps is reported with the ratio to
no digests, and the CPU microseconds each side spent per I/O (the target's utime + stime from
/proc/PID/stat over the run, the host's from its rusage, connect and warm-up included, so a
little high): on a shared machine, where IOPS swing with the others' load, CPU per I/O is the
steadier measure. Only ratios within one run mean anything. Prints a Markdown table (and the
load average before and after); --json writes every run."""
import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time

from common import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NQN = "nqn.2026-11.io.sens-target:ram0"
WORKLOADS = [("4 KiB randread QD32", ["--rw", "randread", "--bs", "4k", "--qd", "32"]),
             ("4 KiB randwrite QD32", ["--rw", "randwrite", "--bs", "4k", "--qd", "32"]),
             ("4 KiB randread QD1", ["--rw", "randread", "--bs", "4k", "--qd", "1"]),
             ("4 KiB randwrite QD1", ["--rw", "randwrite", "--bs", "4k", "--qd", "1"])]
MODES = [("none", []), ("header", ["--hdr-digest"]),
         ("header+data", ["--hdr-digest", "--data-digest"])]


def load():
    return open("/proc/loadavg").read().split()[0]


def start_target(sens, port, poll):
    target = subprocess.Popen(
        ["taskset", "-c", "0", sens, "target", "--listen", f"127.0.0.1:{port}",
         "--discovery-port", "0", "--ns", "ram:1G", "-q"] + (["--poll", poll] if poll else []),
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return target
        except OSError:
            if target.poll() is not None:
                sys.exit(f"sens target exited: {target.stdout.read()}")
            time.sleep(0.1)
    target.kill()
    sys.exit("sens target did not start listening within 10 s")


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])  # utime + stime, in clock ticks


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def perf(a, port, args):
    trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN}"
    cmd = ["taskset", "-c", "1", a.sens, "perf", "-r", trid, "--time", str(a.time),
           "--warmup", "0.5", "-q", "--size", a.size, "--json", "-"] + args
    if a.poll:
        cmd += ["--poll", a.poll]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        sys.exit(f"{' '.join(args)}: sens perf failed: {out.stderr}{out.stdout}")
    return json.loads(out.stdout[out.stdout.index("{"):])


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sens", default=os.path.join(ROOT, "build", "sens"))
    ap.add_argument("--time", type=float, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--size", default="256M", help="region exercised (of a 1 GiB namespace)")
    ap.add_argument("--workloads", default="",
                    help="comma-separated substrings picking workloads (default: all)")
    ap.add_argument("--poll", default="", choices=["", "off", "adaptive", "always"],
                    help="both ends' polling (default: theirs); 'off' makes CPU per I/O count "
                    "work, not spinning")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.reps < 1 or a.time <= 0:
        sys.exit("--reps must be >= 1 and --time > 0")
    picks = [p.strip() for p in a.workloads.split(",") if p.strip()]
    workloads = [w for w in WORKLOADS if not picks or any(p in w[0] for p in picks)]
    if not workloads:
        sys.exit(f"--workloads '{a.workloads}' picks none of: " +
                 ", ".join(w[0] for w in WORKLOADS))
    port = free_port()
    target = start_target(a.sens, port, a.poll)
    runs = []
    load_before = load()
    try:
        # The namespace is written once, so reads touch memory, not the zero page.
        perf(a, port, ["--rw", "write", "--bs", "128k", "--qd", "8", "--prefill"])
        for wl_name, wl in workloads:
            for rep in range(a.reps):
                for mode, flags in MODES:
                    t0, h0 = cpu_ticks(target.pid), children_cpu()
                    job = perf(a, port, wl + flags)["jobs"][0]
                    target_s = (cpu_ticks(target.pid) - t0) / os.sysconf("SC_CLK_TCK")
                    host_s = children_cpu() - h0
                    # I/Os of the whole run, warm-up included (the CPU covers it too).
                    ios = (job["read"]["iops"] + job["write"]["iops"]) * (a.time + 0.5)
                    side = job["read"] if job["read"]["iops"] else job["write"]
                    runs.append({"workload": wl_name, "mode": mode, "rep": rep,
                                 "iops": job["read"]["iops"] + job["write"]["iops"],
                                 "lat_mean_us": side.get("lat_ns", {}).get("mean", 0) / 1e3,
                                 "target_cpu_us": target_s * 1e6 / ios if ios else 0,
                                 "host_cpu_us": host_s * 1e6 / ios if ios else 0})
    finally:
        target.terminate()
        target.wait(timeout=10)
    print(f"load average (1 min) before {load_before}, after {load()}; "
          f"{a.reps} alternated runs of {a.time:g} s each, medians")
    print()
    print("| workload | none kIOPS | header kIOPS (ratio) | header+data kIOPS (ratio) | "
          "mean latency none / header+data (us) | target CPU us/IO none / header+data "
          "(ratio) | host CPU us/IO none / header+data (ratio) |")
    print("|---|---|---|---|---|---|---|")
    for wl_name, _ in workloads:
        def med(mode, key):
            return statistics.median(r[key] for r in runs
                                     if r["workload"] == wl_name and r["mode"] == mode)
        base = med("none", "iops")
        cells = [f"{base / 1e3:.1f}"]
        for mode in ("header", "header+data"):
            cells.append(f"{med(mode, 'iops') / 1e3:.1f} ({med(mode, 'iops') / base:.2f})")
        cells.append(f"{med('none', 'lat_mean_us'):.1f} / {med('header+data', 'lat_mean_us'):.1f}")
        for side in ("target_cpu_us", "host_cpu_us"):
            n, d = med("none", side), med("header+data", side)
            cells.append(f"{n:.2f} / {d:.2f} ({d / n:.2f})" if n else "-")
        print(f"| {wl_name} | " + " | ".join(cells) + " |")
    if a.json:
        json.dump(runs, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
