#!/usr/bin/env python3
"""Reproduces the SENS paper's experiments on this machine (`make bench`).

`sens target` runs pinned to core 0 and `sens perf` to core 1. For every point of the sweep
(backend x policy x workload x concurrency) a fresh target is started, so its coalescing
counters and CPU time belong to that point alone. Each point is the median (by IOPS) of
--reps runs, interleaved across policies (rep 1 of every policy, then rep 2, ...) so that the
machine's slow drift hits every policy alike.

Before the grid, sens_limit (bench/limit, built next to sens) measures the physical ceiling
of the machine for the same traffic shapes with no protocol work; every point records its
IOPS as a fraction of that limit.

Results: bench/out/results.json, a CSV, PNG plots (gnuplot) and docs/results.md
(bench/report.py).
"""
import argparse
import datetime
import json
import math
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
POLICIES = ["off", "eager", "uniform", "semantic", "adaptive"]
# (queues, qd) at which sens_limit measures every (rw, block size) of the grid's workloads.
LIMIT_SHAPES = [(1, 1), (1, 32), (4, 32), (1, 128)]
# Sleeping instead of spinning, for reference only (sens's reactors sleep in epoll).
LIMIT_EPOLL_SHAPES = [(1, 1), (1, 32)]
PROBE_NQN = "nqn.2026-11.dev.sens:probe"


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
        listening = False
        # An exited target (a refused option) fails at once instead of after the deadline.
        while not listening and time.time() < deadline and self.proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                listening = True
            except OSError:
                time.sleep(0.05)
        if not listening:
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait()
            self.log.close()
            with open(self.log.name) as f:
                raise RuntimeError(f"target did not start: {' '.join(cmd)}\n{f.read()[-500:]}")

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=30)
        self.log.close()
        with open(self.stats) as f:
            return json.load(f)


def policy_refusal(sens, policy, workdir):
    """Why this sens binary cannot run `policy` on both ends, or None when it can. Both ends
    are asked: `sens perf` refuses an unknown policy before it connects (exit 2, naming
    --coalesce), and a target with it must start listening."""
    r = subprocess.run([sens, "perf", "-r", f"trtype:tcp traddr:127.0.0.1 trsvcid:{free_port()} "
                        f"subnqn:{PROBE_NQN}", "--coalesce", policy, "--time", "0.1",
                        "--connect-timeout", "500", "-q"],
                       capture_output=True, text=True, timeout=30)
    if r.returncode == 2 and "coalesce" in r.stderr:
        return r.stderr.strip().splitlines()[0]
    try:
        t = Target(sens, "ram", policy, 8192, workdir, "0")
    except RuntimeError as e:
        return "sens target: " + str(e).splitlines()[-1]
    t.proc.send_signal(signal.SIGINT)
    t.proc.wait(timeout=30)
    t.log.close()
    return None


def block_bytes(bs):
    """"4k" -> 4096 (the WORKLOADS spelling)."""
    return int(bs[:-1]) * 1024 if bs.endswith("k") else int(bs)


def median_run(runs):
    """The run with the median IOPS (the lower middle one of an even count: a real run)."""
    return sorted(runs, key=lambda r: r["iops"])[(len(runs) - 1) // 2]


def rep_summary(runs):
    return [{"iops": r["iops"], "lat_avg_us": r["lat_avg_us"], "lat_p99_us": r["lat_p99_us"]}
            for r in runs]


def run_limit(args, rw, bs, queues, qd, poll="busy"):
    out = os.path.join(args.workdir, "limit.json")
    cores = ["--target-core", "0", "--client-core", "1"] if os.cpu_count() >= 2 else \
        ["--target-core", "-1", "--client-core", "-1"]
    cmd = [args.limit, "--rw", rw, "--bs", str(bs), "--qd", str(qd), "--queues", str(queues),
           "--time", str(args.limit_time), "--poll", poll, "--json", out, "-q"] + cores
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.limit_time + 60)
    if r.returncode != 0:
        print(f"  sens_limit failed ({r.returncode}): {r.stderr.strip()[:300]}", file=sys.stderr)
        return None
    with open(out) as f:
        return json.load(f)


def measure_limits(args, workloads):
    """sens_limit at every (rw, block size) of the workloads x LIMIT_SHAPES, busy polling,
    plus a few sleeping (epoll) shapes for reference, each --reps times interleaved. The
    ceiling is the best rep: on a shared machine noise only ever slows a run down, so the
    fastest run is the closest to what the machine can do (the median is kept beside it)."""
    kinds = {("read", 4096), ("write", 4096)}
    for wl in workloads:
        rw, bs, mix, _ = WORKLOADS[wl]
        size = block_bytes(bs)
        if mix is not None or "read" in rw:
            kinds.add(("read", size))
        if mix is not None or "write" in rw:
            kinds.add(("write", size))
    shapes = [(rw, size, q, d, "busy") for rw, size in sorted(kinds, key=lambda k: (k[1], k[0]))
              for q, d in LIMIT_SHAPES]
    shapes += [("read", 4096, q, d, "epoll") for q, d in LIMIT_EPOLL_SHAPES]
    runs = {shape: [] for shape in shapes}
    for rep in range(args.reps):
        for shape in shapes:
            r = run_limit(args, *shape)
            if r:
                runs[shape].append(r)
    limits = []
    for (rw, size, q, d, poll), rs in runs.items():
        if not rs:
            continue
        m = max(rs, key=lambda r: r["iops"])
        limits.append({"rw": rw, "bs": size, "queues": q, "qd": d, "poll": poll,
                       "iops": m["iops"], "iops_median": median_run(rs)["iops"],
                       "lat_avg_us": m["lat_avg_us"],
                       "lat_p50_us": m["lat_p50_us"], "lat_p99_us": m["lat_p99_us"],
                       "target_cpu_s_per_mio": m["target"]["cpu_s_per_mio"],
                       "client_cpu_s_per_mio": m["client"]["cpu_s_per_mio"],
                       "reps": rep_summary(rs)})
        spread = f"{min(r['iops'] for r in rs):,.0f}-{max(r['iops'] for r in rs):,.0f}"
        print(f"limit {rw:5} {size // 1024:3}k {q}x{d:<3} {poll:5} {m['iops']:11,.0f} IOPS "
              f"{m['lat_avg_us']:7.1f} us avg  (best of reps {spread})", flush=True)
    return limits


def nearest_limit(limits, rw, size, queues, qd):
    """The busy-poll limit of this direction and block size at the same shape, else at the
    nearest one: closest total concurrency, then closest queue count (log scale), then the
    higher IOPS (of two equally near ceilings, the one that flatters the point less)."""
    cands = [l for l in limits if l["rw"] == rw and l["bs"] == size and l["poll"] == "busy"]
    if not cands:
        return None

    def distance(l):
        return (abs(math.log2(l["queues"] * l["qd"]) - math.log2(queues * qd)),
                abs(math.log2(l["queues"]) - math.log2(queues)), -l["iops"])
    return min(cands, key=distance)


def limit_for(limits, wl, queues, qd):
    """The ceiling a point of workload `wl` is compared with: {iops, shape, exact}. A mixed
    workload's limit blends the read and write limits by the time each I/O takes
    (1 / (m / read + (1 - m) / write)), since the limit program runs one direction."""
    rw, bs, mix, _ = WORKLOADS[wl]
    size = block_bytes(bs)
    if mix is None:
        l = nearest_limit(limits, "write" if "write" in rw else "read", size, queues, qd)
        if not l:
            return None
        return {"iops": l["iops"], "lat_avg_us": l["lat_avg_us"], "rw": l["rw"], "bs": size,
                "queues": l["queues"], "qd": l["qd"],
                "exact": (l["queues"], l["qd"]) == (queues, qd)}
    r = nearest_limit(limits, "read", size, queues, qd)
    w = nearest_limit(limits, "write", size, queues, qd)
    if not r or not w:
        return None
    m = mix / 100
    return {"iops": 1 / (m / r["iops"] + (1 - m) / w["iops"]), "lat_avg_us": None,
            "rw": f"read {mix}% + write", "bs": size, "queues": r["queues"], "qd": r["qd"],
            "exact": False}


def run_point(args, backend, policy, wl, queues, qd):
    rw, bs, mix, inline = WORKLOADS[wl]
    cores = "0" if os.cpu_count() >= 2 else "0"
    perf_core = "1" if os.cpu_count() >= 2 else "0"
    t = Target(args.sens, backend, policy, inline, args.workdir, cores)
    out = os.path.join(args.workdir, "perf.json")
    trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{t.port} subnqn:{NQN}"
    cmd = ["taskset", "-c", perf_core, args.sens, "perf", "-r", trid, "--rw", rw,
           "--bs", bs, "--qd", str(qd), "--queues", str(queues), "--time", str(args.time),
           "--coalesce", policy, "--json", out, "--size", "256M", "-q"]
    if mix is not None:
        cmd += ["--rwmixread", str(mix)]
    # The region is written once before the measured run, by a run of its own so that the
    # target's CPU counted below is the measured run's: first writes to a fresh RAM namespace
    # fault its pages in (half the speed here), and reads of never-written memory would all
    # hit the one shared zero page, always in cache.
    prefill = ["taskset", "-c", perf_core, args.sens, "perf", "-r", trid, "--rw", "write",
               "--bs", "128k", "--qd", "8", "--size", "256M", "--prefill", "--time", "0.01", "-q"]
    try:
        subprocess.run(prefill, capture_output=True, text=True, timeout=120, check=True)
        cpu0, ctx0 = proc_cpu(t.proc.pid), proc_ctx(t.proc.pid)
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.time + 60)
        cpu1, ctx1 = proc_cpu(t.proc.pid), proc_ctx(t.proc.pid)
    except BaseException:
        t.kill()  # a failed run must not leave a target spinning on core 0
        raise
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


def point_line(p):
    lim = p.get("fraction_of_limit")
    lim = f"{lim:5.2f} of limit" if lim is not None else "   no limit   "
    return (f"{p['backend']:4} {p['workload']:18} {p['policy']:8} {p['queues']:2}x{p['qd']:<3} "
            f"{p['iops']:9.0f} IOPS ({p['iops_min']:.0f}-{p['iops_max']:.0f}) {lim} "
            f"{p['lat_avg_us']:8.1f} us avg  target "
            f"{p['target_usr_s_per_mio'] + p['target_sys_s_per_mio']:6.2f} s/MIO  "
            f"{p['target_send_calls_per_io']:.2f} sends/IO")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sens", default=os.path.join(ROOT, "build", "sens"))
    ap.add_argument("--limit", default=None,
                    help="the sens_limit binary (default: next to --sens)")
    ap.add_argument("--out", default=os.path.join(HERE, "out"))
    ap.add_argument("--quick", action="store_true",
                    help="a reduced sweep: 5 points x 3 reps of 1.5 s, about 2.5 minutes")
    ap.add_argument("--time", type=float, default=None, help="seconds per run")
    ap.add_argument("--limit-time", type=float, default=None, help="seconds per sens_limit run")
    ap.add_argument("--reps", type=int, default=3,
                    help="runs per point, interleaved across policies; the point is their median")
    ap.add_argument("--backends", default=None, help="comma list: ram,file")
    ap.add_argument("--workloads", default=None, help="comma list of " + ",".join(WORKLOADS))
    ap.add_argument("--policies", default=None, help="comma list of " + ",".join(POLICIES))
    ap.add_argument("--shapes", default=None,
                    help="comma list of QUEUESxQD (e.g. 1x1,8x32): only these points of the sweep; "
                         "docs/results.md is then left alone")
    args = ap.parse_args()
    if args.reps < 1:
        ap.error("--reps must be at least 1")
    args.limit = args.limit or os.path.join(os.path.dirname(os.path.abspath(args.sens)),
                                            "sens_limit")
    for binary, target in ((args.sens, "sens"), (args.limit, "sens_limit")):
        if not os.access(binary, os.X_OK):
            ap.error(f"{binary} is not an executable; build it: cmake --build build --target "
                     f"{target}")
    os.makedirs(args.out, exist_ok=True)
    if args.quick:
        backends, workloads = ["ram"], ["4k-randread", "16k-randwrite-r2t"]
        # QD1 and a high concurrency; for the R2T writes a full queue and a moderate load
        # (groups filled by the timer).
        quick_shapes = {"4k-randread": [(1, 1), (1, 32), (4, 32)],
                        "16k-randwrite-r2t": [(1, 32), (4, 8)]}
        args.time = args.time or 1.5
        args.limit_time = args.limit_time or 0.5
    else:
        backends, workloads = ["ram", "file"], list(WORKLOADS)
        quick_shapes = None
        args.time = args.time or 3
        args.limit_time = args.limit_time or 2
    if args.backends:
        backends = args.backends.split(",")
    if args.workloads:
        workloads = args.workloads.split(",")
    for w in workloads:
        if w not in WORKLOADS:
            ap.error(f"unknown workload {w!r}: expected one of {', '.join(WORKLOADS)}")
    wanted_shapes = set()
    for sh in (args.shapes.split(",") if args.shapes else []):
        q, _, d = sh.partition("x")
        if not (q.isdigit() and d.isdigit() and int(q) > 0 and int(d) > 0):
            ap.error(f"--shapes: {sh!r} is not QUEUESxQD (e.g. 4x32)")
        wanted_shapes.add((int(q), int(d)))
    wanted = args.policies.split(",") if args.policies else POLICIES
    with tempfile.TemporaryDirectory(prefix="sens-bench-", dir="/var/tmp") as work:
        args.workdir = work
        # Policies still being added to sens (eager, adaptive) are skipped, not failed.
        policies, skipped = [], {}
        for p in wanted:
            why = policy_refusal(args.sens, p, work)
            if why:
                skipped[p] = why
                print(f"note: skipping policy {p!r}, which {args.sens} does not accept ({why})")
            else:
                policies.append(p)
        if not policies:
            sys.exit("no policy to run")
        if "file" in backends:
            with open(os.path.join(work, "ns.img"), "wb") as f:
                f.truncate(1 << 30)
        t0 = time.time()
        limits = measure_limits(args, workloads)
        print(f"limits measured in {time.time() - t0:.0f}s", flush=True)
        # Moderate concurrency for the R2T writes, where groups fill by timer rather than by
        # capacity: the regime the semantic policy is for.
        moderate = [(1, 8), (2, 8), (4, 8), (4, 16)]
        concurrency, qd1 = [(q, 32) for q in (1, 2, 4, 8, 16)], [(1, 1)]
        file_workloads = ("4k-randread", "4k-randwrite", "16k-randwrite-r2t")
        groups = []
        for b in backends:
            for w in workloads:
                if b == "file" and w not in file_workloads and not args.quick:
                    continue
                if quick_shapes is not None:
                    here = quick_shapes.get(w, [(1, 1), (4, 32)])
                else:
                    here = qd1 + concurrency + (moderate if "write" in w else [])
                if wanted_shapes:
                    here = [sh for sh in here if sh in wanted_shapes]
                groups += [(b, w, q, d) for (q, d) in here]
        total, done, points = len(groups) * args.reps * len(policies), 0, []
        for b, w, q, d in groups:
            runs = {p: [] for p in policies}
            for rep in range(1, args.reps + 1):
                for p in policies:
                    done += 1
                    try:
                        r = run_point(args, b, p, w, q, d)
                    except (RuntimeError, subprocess.SubprocessError, OSError, ValueError) as e:
                        print(f"  run failed: {e}", file=sys.stderr)
                        r = None
                    if r:
                        runs[p].append(r)
                    print(f"[{done}/{total} {time.time() - t0:5.0f}s] {b:4} {w:18} {p:8} "
                          f"{q:2}x{d:<3} rep {rep}/{args.reps} "
                          + (f"{r['iops']:9.0f} IOPS {r['lat_avg_us']:8.1f} us avg" if r
                             else "failed"), flush=True)
            lim = limit_for(limits, w, q, d)
            for p in policies:
                if not runs[p]:
                    continue
                pt = dict(median_run(runs[p]))
                pt["rep_count"] = len(runs[p])
                pt["reps"] = rep_summary(runs[p])
                pt["iops_min"] = min(r["iops"] for r in runs[p])
                pt["iops_max"] = max(r["iops"] for r in runs[p])
                pt["limit"] = lim
                pt["fraction_of_limit"] = pt["iops"] / lim["iops"] if lim else None
                points.append(pt)
                print("  median " + point_line(pt), flush=True)
    idle = subprocess.run([sys.executable, os.path.join(HERE, "idle.py"), "--sens", args.sens,
                           "--seconds", "3" if args.quick else "10"], capture_output=True, text=True)
    print(idle.stdout.strip())
    meta = {
        "idle": idle.stdout.strip(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                     if l.startswith("model name")), platform.processor()),
        "cores": os.cpu_count(), "kernel": platform.release(), "quick": args.quick,
        "seconds_per_point": args.time, "reps": args.reps, "limit_seconds": args.limit_time,
        "policies": policies, "policies_skipped": skipped, "command": " ".join(sys.argv),
    }
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"meta": meta, "limits": limits, "points": points}, f, indent=1)
    subprocess.run([sys.executable, os.path.join(HERE, "report.py"), "--in",
                    os.path.join(args.out, "results.json"), "--out", args.out, "--sens", args.sens]
                   + ([] if args.quick or args.shapes else
                      ["--docs", os.path.join(ROOT, "docs", "results.md")]),
                   check=True)


if __name__ == "__main__":
    main()
