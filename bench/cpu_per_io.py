#!/usr/bin/env python3
"""CPU per I/O of `sens perf` beside `sens target` (issue 9, item 5: a lean host).

Starts `sens target` (RAM namespace) pinned to core 0 and runs `sens perf` pinned to core 1,
4 KiB random reads at QD32 by default, alternating the host binaries given (e.g. a build from
before a change and one from after), REPS times each. For each run: IOPS, the host's CPU
microseconds per I/O (its usr + sys from the JSON report) and the target's (utime + stime
of /proc/PID/stat over the same run, connect included, so slightly high). Prints the median of
each. The machine is shared: read the numbers as ratios within one run of this script.

    bench/cpu_per_io.py --target build/sens --host before=/tmp/sens-before --host after=build/sens
"""
import argparse, json, os, socket, statistics, subprocess, sys, tempfile, time

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])  # utime + stime, in clock ticks

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", required=True)
    ap.add_argument("--host", action="append", required=True, help="NAME=PATH of a sens binary")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--time", type=float, default=4)
    ap.add_argument("--perf-args", default="--rw randread --bs 4k --qd 32")
    a = ap.parse_args()
    hz = os.sysconf("SC_CLK_TCK")
    port = free_port()
    tgt = subprocess.Popen(["taskset", "-c", "0", a.target, "target", "--listen", f"127.0.0.1:{port}",
                            "--discovery-port", "0", "--ns", "ram:1G"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:nqn.2026-11.io.sens-target:ram0"
    hosts = [h.split("=", 1) for h in a.host]
    res = {name: [] for name, _ in hosts}
    try:
        with tempfile.TemporaryDirectory() as d:
            for rep in range(a.reps):
                for name, path in hosts:
                    out = os.path.join(d, "perf.json")
                    t0 = cpu_ticks(tgt.pid)
                    subprocess.run(["taskset", "-c", "1", path, "perf", "-r", trid, "-q", "--time",
                                    str(a.time), "--json", out] + a.perf_args.split(),
                                   check=True, stdout=subprocess.DEVNULL)
                    t1 = cpu_ticks(tgt.pid)
                    j = json.load(open(out))
                    ios = j["total_ios"]
                    host_us = (j["cpu_user_s"] + j["cpu_sys_s"]) / ios * 1e6
                    # The target's ticks cover the whole run; scale to the measured window.
                    tgt_us = (t1 - t0) / hz / (ios * 1.0) * 1e6 * (j["runtime_s"] / (a.time + 0.3))
                    res[name].append((j["iops"], host_us, tgt_us))
                    print(f"{name:8} rep {rep}: {j['iops']:9.0f} IOPS  host {host_us:5.2f} us/IO  "
                          f"target {tgt_us:5.2f} us/IO  (host usr {j['cpu_user_s']:.2f} s sys "
                          f"{j['cpu_sys_s']:.2f} s)", flush=True)
    finally:
        tgt.kill(); tgt.wait()
    print("medians (machine shared: compare within this run):")
    for name, rows in res.items():
        m = [statistics.median(c) for c in zip(*rows)]
        print(f"{name:8} {m[0]:9.0f} IOPS  host {m[1]:5.2f} us/IO  target {m[2]:5.2f} us/IO  "
              f"host/target {m[1] / m[2]:.2f}")

if __name__ == "__main__":
    sys.exit(main())
