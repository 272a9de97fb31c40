#!/usr/bin/env python3
"""Shared connections (issue 11, after SPANoF): lock vs sendlist vs none.

`sens target` (RAM namespace) pinned to core 0, `sens perf` pinned to core 1 with T submitting
threads (so every host thread shares one core, an oversubscribed host), 4 KiB random reads,
QD 32 per thread. Points, each the median of REPS interleaved runs:
  * 8 threads over 1 and 2 connections: lock, sendlist; none (8 connections);
  * 64 threads x QD 8 over 2 connections: lock, sendlist (errors are reported);
  * IOPS and p99 against thread count (1, 2, 4, 8, 16) for none, lock and sendlist (1 connection);
  * fio through build/libsens_fio.so against sens perf at the same settings (QD 32, 1 and 4
    jobs/threads, a connection each, sens perf's 64 MiB region split between them), with fio's
    default reaping (one completion per getevents call) and with every completion of a pass
    reaped at once (iodepth_batch_complete_max=32, what sens perf does), when the engine is built.
Writes the rows as JSON (--json) and prints a markdown table. The machine is shared: read
the numbers as ratios within one run.

    bench/share.py --sens build/sens --json docs/results/share.json --plot docs/results
    bench/share.py --from-json docs/results/share.json --plot docs/results   # plots only

--plot DIR writes DIR/share-iops.png and DIR/share-p99.png (gnuplot): IOPS and p99 against the
thread count for none (a connection per thread), lock and sendlist (1 connection).
"""
import argparse, json, os, socket, statistics, subprocess, sys, tempfile, time

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def run_point(sens, trid, threads, mode, conns, qd, secs, d):
    out = os.path.join(d, "p.json")
    args = ["taskset", "-c", "1", sens, "perf", "-r", trid, "-q", "--rw", "randread", "--bs", "4k",
            "--qd", str(qd), "--time", str(secs), "--warmup", "0.5", "--threads", str(threads),
            "--share", mode, "--json", out]
    if mode != "none":
        args += ["--connections", str(conns)]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, timeout=secs + 120)
    j = json.load(open(out))
    th = j["threads"]
    return {"iops": j["iops"], "p99_us": j["clat_ns"]["percentile"]["99.000000"] / 1e3,
            "lat_avg_us": j["clat_ns"]["mean"] / 1e3,
            "host_cpu_us_per_io": (j["cpu_user_s"] + j["cpu_sys_s"]) / max(j["total_ios"], 1) * 1e6,
            "thread_iops_min": min(t["iops"] for t in th), "thread_iops_max": max(t["iops"] for t in th),
            "drain_per_pass": (j["drain"].get("per_pass") or {}).get("mean"),
            "send_per_io": j["syscalls"]["send_per_io"], "errors": j["errors"]}

def run_fio(engine, trid, jobs, secs, batch):
    """fio over the engine at sens perf's settings: its 64 MiB region split between the jobs as
    sens perf splits it between threads. batch: reap every completion a pass delivers
    (iodepth_batch_complete_max=32), as sens perf does; fio's default reaps one per call."""
    part = 64 // jobs
    args = ["taskset", "-c", "1", "fio", "--name=f", f"--ioengine=external:{engine}",
            f"--sens_trid={trid}", "--rw=randread", "--bs=4k", "--iodepth=32", f"--size={part}M",
            f"--offset_increment={part}M", f"--numjobs={jobs}", "--thread", "--group_reporting",
            "--time_based", f"--runtime={secs}", "--ramp_time=0.5", "--output-format=json"]
    if batch:
        args.append("--iodepth_batch_complete_max=32")
    out = subprocess.run(args, check=True, capture_output=True, text=True, timeout=secs + 120).stdout
    j = json.loads(out[out.index("{"):])["jobs"][0]
    r = j["read"]
    return {"iops": r["iops"], "p99_us": r["clat_ns"]["percentile"]["99.000000"] / 1e3}

COLORS = {"none": "#1b9e77", "lock": "#d95f02", "sendlist": "#7570b3"}

def plot(rows, out_dir):
    """IOPS and p99 against threads, one line per share mode (lock/sendlist over 1 connection)."""
    series = {}
    for r in rows:
        if r["share"] != "none" and r["connections"] != 1:
            continue  # the 2-connection points are the table's
        series.setdefault(r["share"], []).append((r["threads"], r["iops"] / 1e3, r["p99_us"]))
    for key, col, ylabel, name in (("iops", 1, "kIOPS (median)", "share-iops.png"),
                                   ("p99", 2, "p99 latency, us (median)", "share-p99.png")):
        data, plots = [], []
        for i, mode in enumerate(m for m in ("none", "lock", "sendlist") if m in series):
            pts = sorted(series[mode])
            data.append(f"$d{i} << EOD\n" + "\n".join(f"{t} {p[col - 1]}" for t, *p in pts) + "\nEOD")
            label = f"{mode} ({'a connection per thread' if mode == 'none' else '1 connection'})"
            plots.append(f"$d{i} using 1:2 with linespoints lw 2 pt 7 lc rgb '{COLORS[mode]}' "
                         f"title '{label}'")
        script = "\n".join(data) + f"""
set terminal pngcairo size 800,500 font ',11'
set output '{os.path.join(out_dir, name)}'
set title '4 KiB random reads, QD 32 per thread, host threads on one core'
set xlabel 'submitting threads'
set ylabel '{ylabel}'
set grid
set key {'top left' if key == 'p99' else 'bottom right'}
set logscale x 2
{'set logscale y' if key == 'p99' else 'set yrange [0:*]'}
plot {', '.join(plots)}
"""
        subprocess.run(["gnuplot"], input=script, text=True, check=True)
        print(f"wrote {os.path.join(out_dir, name)}", file=sys.stderr)

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sens", default="build/sens")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--time", type=float, default=2)
    ap.add_argument("--threads", default="1,2,4,8,16")
    ap.add_argument("--json")
    ap.add_argument("--fio-only", action="store_true", help="only fio engine vs sens perf")
    ap.add_argument("--plot", metavar="DIR", help="write DIR/share-iops.png and DIR/share-p99.png")
    ap.add_argument("--from-json", metavar="FILE", help="no run: plot the rows of a --json file")
    a = ap.parse_args()
    if a.from_json:
        plot(json.load(open(a.from_json))["rows"], a.plot or ".")
        return 0
    points = []  # (threads, mode, connections, QD per thread)
    for t in [int(x) for x in a.threads.split(",")]:
        points += [(t, "none", t, 32), (t, "lock", 1, 32), (t, "sendlist", 1, 32)]
    # 64 x QD 8 over 2 connections: 256 commands per connection (64 x 32 would pass CAP.MQES)
    points += [(8, "lock", 2, 32), (8, "sendlist", 2, 32), (64, "lock", 2, 8), (64, "sendlist", 2, 8)]
    if a.fio_only:
        points = []
    port = free_port()
    tgt = subprocess.Popen(["taskset", "-c", "0", a.sens, "target", "--listen", f"127.0.0.1:{port}",
                            "--discovery-port", "0", "--ns", "ram:1G"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)
    trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:nqn.2026-11.io.sens-target:ram0"
    runs = {p: [] for p in points}
    engine = os.path.join(os.path.dirname(os.path.abspath(a.sens)), "libsens_fio.so")
    fio_points = [1, 4] if os.path.exists(engine) else []
    fio_kinds = ("fio", "fio_batch", "perf")
    fio_runs = {(k, t): [] for t in fio_points for k in fio_kinds}
    try:
        with tempfile.TemporaryDirectory() as d:
            for rep in range(a.reps):  # interleaved: each repetition visits every point
                for p in points:
                    r = run_point(a.sens, trid, *p, a.time, d)
                    runs[p].append(r)
                    print(f"rep {rep} T={p[0]:<2} {p[1]:8} x{p[2]:<2} {r['iops']:9.0f} IOPS "
                          f"p99 {r['p99_us']:8.1f} us", file=sys.stderr, flush=True)
                for t in fio_points:
                    fio_runs[("fio", t)].append(run_fio(engine, trid, t, a.time, False))
                    fio_runs[("fio_batch", t)].append(run_fio(engine, trid, t, a.time, True))
                    fio_runs[("perf", t)].append(run_point(a.sens, trid, t, "none", t, 32, a.time, d))
                    print(f"rep {rep} fio {t} job(s) {fio_runs[('fio', t)][-1]['iops']:9.0f} IOPS, "
                          f"batched reaping {fio_runs[('fio_batch', t)][-1]['iops']:9.0f}, "
                          f"sens perf {fio_runs[('perf', t)][-1]['iops']:9.0f}", file=sys.stderr,
                          flush=True)
    finally:
        tgt.kill(); tgt.wait()
    rows = []
    for p in points:
        rs = runs[p]
        med = {k: statistics.median([r[k] for r in rs]) if rs[0][k] is not None else None for k in rs[0]}
        med["errors"] = sum(r["errors"] for r in rs)
        med.update({"threads": p[0], "share": p[1], "connections": p[2], "qd": p[3],
                    "iops_min": min(r["iops"] for r in rs), "iops_max": max(r["iops"] for r in rs)})
        rows.append(med)
    fio_rows = []
    for t in fio_points:
        med = {k: statistics.median(r["iops"] for r in fio_runs[(k, t)]) for k in fio_kinds}
        p99 = {k: statistics.median(r["p99_us"] for r in fio_runs[(k, t)]) for k in fio_kinds}
        fio_rows.append({"jobs": t, "fio_iops": med["fio"], "fio_batch_iops": med["fio_batch"],
                         "perf_iops": med["perf"], "ratio": med["fio"] / med["perf"],
                         "batch_ratio": med["fio_batch"] / med["perf"], "fio_p99_us": p99["fio"],
                         "fio_batch_p99_us": p99["fio_batch"], "perf_p99_us": p99["perf"],
                         "fio_runs": [r["iops"] for r in fio_runs[("fio", t)]],
                         "fio_batch_runs": [r["iops"] for r in fio_runs[("fio_batch", t)]],
                         "perf_runs": [r["iops"] for r in fio_runs[("perf", t)]]})
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"reps": a.reps, "seconds": a.time, "rows": rows, "fio": fio_rows}, f, indent=2)
    print("| threads x QD | share | connections | kIOPS (min-max) | p99 us | avg us | host CPU us/IO | per-thread kIOPS min-max | send-list entries/pass | sends/IO | errors |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        dp = f"{r['drain_per_pass']:.1f}" if r["drain_per_pass"] else "-"
        print(f"| {r['threads']} x {r['qd']} | {r['share']} | {r['connections']} | {r['iops']/1e3:.1f} "
              f"({r['iops_min']/1e3:.0f}-{r['iops_max']/1e3:.0f}) | {r['p99_us']:.0f} | "
              f"{r['lat_avg_us']:.0f} | {r['host_cpu_us_per_io']:.2f} | "
              f"{r['thread_iops_min']/1e3:.1f}-{r['thread_iops_max']/1e3:.1f} | {dp} | "
              f"{r['send_per_io']:.2f} | {r['errors']} |")

    if a.plot and rows:
        plot(rows, a.plot)
    if fio_rows:
        print()
        print("| jobs x QD32 | fio + libsens_fio kIOPS (p99 us) | fio/perf | same, iodepth_batch_complete_max=32 | fio/perf | sens perf kIOPS (p99 us) |")
        print("|---|---|---|---|---|---|")
        for r in fio_rows:
            print(f"| {r['jobs']} | {r['fio_iops']/1e3:.1f} ({r['fio_p99_us']:.0f}) | {r['ratio']:.2f} | "
                  f"{r['fio_batch_iops']/1e3:.1f} ({r['fio_batch_p99_us']:.0f}) | {r['batch_ratio']:.2f} | "
                  f"{r['perf_iops']/1e3:.1f} ({r['perf_p99_us']:.0f}) |")

if __name__ == "__main__":
    sys.exit(main())
