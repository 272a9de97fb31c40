#!/usr/bin/env python3
"""Turns bench/out/results.json into a CSV, PNG plots (gnuplot) and docs/results.md."""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys

POLICIES = ["off", "eager", "uniform", "semantic", "adaptive"]
WORKLOADS = ["4k-randread", "4k-randwrite", "16k-randwrite-r2t", "16k-randread", "4k-randrw-90",
             "4k-randrw-50", "16k-randrw-90", "16k-randrw-50"]
COLORS = {"off": "#c0392b", "eager": "#e67e22", "uniform": "#2980b9", "semantic": "#27ae60",
          "adaptive": "#8e44ad"}


def select(points, **kw):
    return [p for p in points if all(p.get(k) == v for k, v in kw.items())]


def one(points, **kw):
    s = select(points, **kw)
    return s[0] if s else None


def workload_order(name):
    return WORKLOADS.index(name) if name in WORKLOADS else len(WORKLOADS)


def policy_order(name):
    return POLICIES.index(name) if name in POLICIES else len(POLICIES)


def iops_spread(p):
    """min-max IOPS of the point's repetitions ("-" for a single run or an old results file)."""
    if p.get("rep_count", 1) < 2 or "iops_min" not in p:
        return "-"
    return f"{fmt(p['iops_min'])}-{fmt(p['iops_max'])}"


def fraction(p):
    f = p.get("fraction_of_limit")
    return "-" if f is None else f"{f:.2f}"


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def line_plot(path, title, ylabel, series, logx=True):
    """series: {policy: [(x, y)]}"""
    data = []
    plots = []
    for i, (name, pts) in enumerate(series.items()):
        if not pts:
            continue
        block = "\n".join(f"{x} {y}" for x, y in pts)
        data.append(f"$d{i} << EOD\n{block}\nEOD")
        plots.append(f"$d{i} using 1:2 with linespoints lw 2 pt 7 lc rgb '{COLORS.get(name, '#555')}' "
                     f"title '{name}'")
    if not plots:
        return False
    xs = {x for pts in series.values() for x, _ in pts}
    # One concurrency only (a quick run): give gnuplot a range around it.
    xrange = f"set xrange [{min(xs) / 2}:{max(xs) * 2}]" if len(xs) == 1 else ""
    gnuplot("\n".join(data) + f"""
set terminal pngcairo size 800,500 font ',11'
set output '{path}'
set title '{title}'
set xlabel 'concurrency (queues x QD)'
set ylabel '{ylabel}'
set grid
set key top left
{'set logscale x 2' if logx else ''}
{xrange}
plot {', '.join(plots)}
""")
    return True


def bar_plot(path, title, ylabel, rows, cols, stacked=False):
    """rows: [(label, [v per col])]"""
    if not rows:
        return False
    block = "\n".join(f'"{label}" ' + " ".join(f"{v:.6g}" for v in vals) for label, vals in rows)
    style = "set style histogram rowstacked" if stacked else "set style histogram clustered gap 1"
    plots = ", ".join(
        f"$d using {i + 2}:xtic(1) title '{c}'" + (f" lc rgb '{COLORS[c]}'" if c in COLORS else "")
        for i, c in enumerate(cols))
    gnuplot(f"""$d << EOD
{block}
EOD
set terminal pngcairo size 900,500 font ',11'
set output '{path}'
set title '{title}'
set ylabel '{ylabel}'
set style data histograms
{style}
set style fill solid 0.85 border -1
set boxwidth 0.9
set grid ytics
set key outside top center horizontal
set yrange [0:*]
set xtics rotate by -20
plot {plots}
""")
    return True


def model(sens, lam, p, B=16, c2=4, T=50):
    """Eq. 1 and Eq. 4 of the paper from `sens model`."""
    r = subprocess.run([sens, "model", "--lambda", f"{lam:.6g}", "--B", str(B), "--T-us", str(T),
                        "--p", f"{max(min(p, 1.0), 1e-6):.6g}", "--c2", str(c2), "--sim-groups", "0",
                        "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        return None
    return json.loads(r.stdout)


def fmt(v, nd=0):
    if v is None:
        return "-"
    return f"{v:,.{nd}f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--in", dest="inp", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--docs", default=None, help="write the markdown report here")
    ap.add_argument("--sens", default="build/sens")
    args = ap.parse_args()
    res = json.load(open(args.inp))
    meta, points = res["meta"], res["points"]
    limits = res.get("limits", [])
    # The policies this run measured, in the canonical order (a binary may lack some).
    policies = sorted({p["policy"] for p in points}, key=lambda n: (policy_order(n), n))
    os.makedirs(args.out, exist_ok=True)

    keys = ["backend", "workload", "policy", "queues", "qd", "concurrency", "iops", "mib_s",
            "lat_avg_us", "lat_p50_us", "lat_p99_us", "target_usr_s_per_mio",
            "target_sys_s_per_mio", "host_usr_s_per_mio", "host_sys_s_per_mio",
            "target_ctx_per_mio", "host_ctx_per_mio", "target_send_calls_per_io",
            "host_send_calls_per_io", "target_pdus_per_flush", "rep_count", "iops_min",
            "iops_max", "fraction_of_limit"]
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(keys + ["r2t_delay_mean_us", "r2t_delay_p99_us", "limit_iops"])
        for p in points:
            w.writerow([p.get(k) for k in keys] +
                       [p["r2t_delay_us"]["mean"], p["r2t_delay_us"]["p99"],
                        (p.get("limit") or {}).get("iops")])

    plots = {}
    backends = sorted({p["backend"] for p in points}, key=lambda b: b != "ram")
    for b in backends:
        for wl in ["4k-randread", "4k-randwrite", "16k-randwrite-r2t", "16k-randread"]:
            series = {pol: sorted((p["concurrency"], p["iops"]) for p in
                                  select(points, backend=b, workload=wl, policy=pol, qd=32))
                      for pol in policies}
            name = f"iops-{b}-{wl}.png"
            if line_plot(os.path.join(args.out, name), f"{wl} IOPS ({b} namespace)", "IOPS", series):
                plots[("iops", b, wl)] = name
            series = {pol: sorted((p["concurrency"], p["lat_avg_us"]) for p in
                                  select(points, backend=b, workload=wl, policy=pol, qd=32))
                      for pol in policies}
            name = f"latency-{b}-{wl}.png"
            if line_plot(os.path.join(args.out, name), f"{wl} average latency ({b})", "us", series):
                plots[("lat", b, wl)] = name
        # R2T writes at every queue depth, moderate ones included: one cluster per point.
        pts = [p for p in select(points, backend=b, workload="16k-randwrite-r2t") if p["qd"] > 1]
        labels = sorted({(p["concurrency"], p["queues"], p["qd"]) for p in pts})
        rows = [(f"{q}x{d}", [(one(pts, queues=q, qd=d, policy=pol) or {}).get("iops", 0)
                              for pol in policies]) for _, q, d in labels]
        name = f"r2t-writes-{b}.png"
        if bar_plot(os.path.join(args.out, name), f"16 KiB writes through R2T, IOPS ({b})", "IOPS",
                    rows, policies):
            plots[("r2t", b)] = name
        # CPU per million I/Os at the highest concurrency, stacked user/system.
        rows = []
        for wl in ["4k-randread", "4k-randwrite"]:
            top = max((p["concurrency"] for p in select(points, backend=b, workload=wl)), default=None)
            for pol in policies:
                p = one(points, backend=b, workload=wl, policy=pol, concurrency=top, qd=32)
                if p:
                    rows.append((f"{wl} {pol}", [p["target_usr_s_per_mio"], p["target_sys_s_per_mio"],
                                                 p["host_usr_s_per_mio"], p["host_sys_s_per_mio"]]))
        name = f"cpu-{b}.png"
        if bar_plot(os.path.join(args.out, name), f"CPU seconds per million I/Os ({b}, highest concurrency)",
                    "CPU s / MIO", rows, ["target user", "target system", "host user", "host system"],
                    stacked=True):
            plots[("cpu", b)] = name
        rows = []
        for wl in ["4k-randrw-90", "4k-randrw-50", "16k-randrw-90", "16k-randrw-50"]:
            mid = [p for p in select(points, backend=b, workload=wl, qd=32)]
            if not mid:
                continue
            conc = sorted({p["concurrency"] for p in mid})
            c = conc[len(conc) // 2]
            vals = [(one(mid, policy=pol, concurrency=c) or {}).get("iops", 0) for pol in policies]
            rows.append((f"{wl} @{c}", vals))
        name = f"mixed-{b}.png"
        if bar_plot(os.path.join(args.out, name), f"Mixed workloads, IOPS ({b})", "IOPS", rows, policies):
            plots[("mixed", b)] = name

    if not args.docs:
        print(f"report: {len(points)} points -> {args.out}/results.csv and {len(plots)} plots")
        return
    # The report is committed, so its plots go beside it (docs/results/), not in bench/out/.
    docs_dir = os.path.dirname(os.path.abspath(args.docs))
    plot_dir = os.path.join(docs_dir, "results")
    os.makedirs(plot_dir, exist_ok=True)
    for name in plots.values():
        shutil.copyfile(os.path.join(args.out, name), os.path.join(plot_dir, name))
    # The numbers behind every table are committed too.
    for src in (os.path.abspath(args.inp), os.path.join(os.path.abspath(args.out), "results.csv")):
        dst = os.path.join(plot_dir, os.path.basename(src))
        if os.path.abspath(src) != os.path.abspath(dst):
            shutil.copyfile(src, dst)
    rel = "results"
    L = []
    L.append("# SENS on this machine: measured\n")
    reps = meta.get("reps", 1)
    L.append(f"Run {meta['date']} on {meta['cores']} cores ({meta['cpu']}), kernel {meta['kernel']}; "
             f"{meta['seconds_per_point']} s per run; target pinned to core 0, `sens perf` to core 1, "
             "both over 127.0.0.1, a fresh target per run.\n")
    if reps > 1:
        L.append(f"Every point is the median (by IOPS) of {reps} runs, interleaved across policies "
                 "(run 1 of every policy at that point, then run 2, ...) so that the machine's drift "
                 "hits all policies alike; *spread* is the lowest and highest IOPS of those runs.\n")
    if meta.get("policies_skipped"):
        L.append("Policies the measured binary did not accept, so not in these tables: " +
                 "; ".join(f"`{k}` ({v})" for k, v in meta["policies_skipped"].items()) + ".\n")
    if meta.get("rerun"):
        L.append(f"Re-measured: {meta['rerun']}.\n")
    if meta.get("idle"):
        L.append(f"Idle connections (`python3 bench/idle.py`): {meta['idle']}.\n")
    L.append(f"Regenerate everything here with `make bench` (or `{meta['command']}`); "
             "the raw numbers are in `docs/results/results.json` and `results.csv`, and `python3 bench/report.py --in docs/results/results.json --out bench/out --docs docs/results.md` rebuilds this page from them.\n")
    if limits:
        L.append("\n## The physical limit\n")
        L.append("`build/sens_limit` (bench/limit): two pinned threads (cores 0 and 1) exchange "
                 "requests and answers of NVMe/TCP's sizes over 127.0.0.1 with no protocol work "
                 "(read: 72 B -> 24 + bs + 24 B; write: 72 + bs B -> 24 B), each side reading all "
                 "that is available and answering with one `sendmsg` per connection per pass. "
                 f"{meta.get('limit_seconds', '?')} s per run; the limit is the best of the runs "
                 "(noise only slows a run down), the median beside it. *x limit* in the tables "
                 "below divides a point's IOPS by the limit of its direction and block size at the "
                 "same queues x QD, or at the nearest measured shape (closest total concurrency, "
                 "then queue count), marked ~; a mixed workload's limit blends the read and write "
                 "limits by the time each I/O takes.\n")
        L.append("| rw | bs | queues x QD | polling | IOPS (best) | IOPS (median) | avg us | p99 us "
                 "| target CPU s/MIO | client CPU s/MIO |")
        L.append("|---|---|---|---|---|---|---|---|---|---|")
        for l in sorted(limits, key=lambda l: (l["poll"] != "busy", l["bs"], l["rw"],
                                               l["queues"] * l["qd"], l["queues"])):
            L.append(f"| {l['rw']} | {l['bs'] // 1024} KiB | {l['queues']}x{l['qd']} | {l['poll']} | "
                     f"{fmt(l['iops'])} | {fmt(l.get('iops_median'))} | {fmt(l['lat_avg_us'], 1)} | "
                     f"{fmt(l['lat_p99_us'], 1)} | {fmt(l.get('target_cpu_s_per_mio'), 2)} | "
                     f"{fmt(l.get('client_cpu_s_per_mio'), 2)} |")

    def limit_cell(p):
        lim = p.get("limit")
        if not lim:
            return "-"
        return ("" if lim.get("exact") else "~") + fmt(lim["iops"])

    for b in backends:
        L.append(f"\n## {b} namespace\n")
        # Policies side by side: the table the "never slower than the best" reads.
        rows = sorted({(p["workload"], p["queues"], p["qd"]) for p in select(points, backend=b)},
                      key=lambda r: (workload_order(r[0]), r[2], r[1]))
        if rows:
            L.append(("Median IOPS" if reps > 1 else "IOPS") + " of each policy" +
                     (", and in brackets its fraction of the physical limit" if limits else "") +
                     "; **bold** is the best policy of the row.\n")
            L.append("| workload | queues x QD | " + ("limit IOPS | " if limits else "") +
                     " | ".join(policies) + " |")
            L.append("|---|---|" + ("---|" if limits else "") + "---|" * len(policies))
            for wl, q, d in rows:
                here = {p["policy"]: p for p in select(points, backend=b, workload=wl, queues=q, qd=d)}
                best = max(here.values(), key=lambda p: p["iops"])["policy"]
                cells = []
                for pol in policies:
                    p = here.get(pol)
                    if not p:
                        cells.append("-")
                        continue
                    v = fmt(p["iops"])
                    v = f"**{v}**" if pol == best else v
                    cells.append(v + (f" ({fraction(p)})" if p.get("fraction_of_limit") is not None else ""))
                anyp = next(iter(here.values()))
                L.append(f"| {wl} | {q}x{d} | " + (f"{limit_cell(anyp)} | " if limits else "") +
                         " | ".join(cells) + " |")
        for wl in WORKLOADS:
            pts = select(points, backend=b, workload=wl)
            if not pts:
                continue
            L.append(f"\n### {wl}\n")
            L.append("| queues x QD | policy | IOPS | spread | x limit | MiB/s | avg us | p50 us | p99 us "
                     "| target CPU s/MIO (usr+sys) | host CPU s/MIO | target sends/IO | PDUs/flush "
                     "| R2T delay avg us |")
            L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
            for p in sorted(pts, key=lambda p: (p["qd"], p["queues"], policy_order(p["policy"]))):
                L.append(f"| {p['queues']}x{p['qd']} | {p['policy']} | {fmt(p['iops'])} | {iops_spread(p)} | "
                         f"{fraction(p)} | {fmt(p['mib_s'], 1)} | "
                         f"{fmt(p['lat_avg_us'], 1)} | {fmt(p['lat_p50_us'], 1)} | {fmt(p['lat_p99_us'], 1)} | "
                         f"{fmt(p['target_usr_s_per_mio'], 2)}+{fmt(p['target_sys_s_per_mio'], 2)} | "
                         f"{fmt(p['host_usr_s_per_mio'], 2)}+{fmt(p['host_sys_s_per_mio'], 2)} | "
                         f"{fmt(p['target_send_calls_per_io'], 3)} | {fmt(p['target_pdus_per_flush'], 1)} | "
                         f"{fmt(p['r2t_delay_us']['mean'], 1) if p['r2t_delay_us']['count'] else '-'} |")
            for kind in ("iops", "lat"):
                if (kind, b, wl) in plots:
                    L.append(f"\n![{wl} {kind}]({rel}/{plots[(kind, b, wl)]})")
        for kind in ("r2t", "cpu", "mixed"):
            if (kind, b) in plots:
                L.append(f"\n![{kind}]({rel}/{plots[(kind, b)]})\n")

    # The model beside the measurement.
    L.append("\n## The model beside the measurement\n")
    L.append("For the write points: the target's measured PDUs per flush next to Eq. (1) at the "
             "measured arrival rate lambda (target PDUs sent per second per connection, since each connection has its own group), and the measured R2T "
             "queueing delay ratio semantic/uniform next to Eq. (4) with p the measured fraction of "
             "R2T among the target's PDUs (`sens model --lambda L --B 16 --T-us 50 --p P --c2 4`).\n")
    L.append("| backend | workload | queues x QD | policy | lambda (PDU/s/conn) | p (R2T share) | PDUs/flush measured "
             "| E[B_eff] Eq. 1 | R2T delay avg us | ratio sem/uni measured | R Eq. 4 |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for b in backends:
        for wl in ["4k-randwrite", "16k-randwrite-r2t"]:
            for p in sorted((p for p in select(points, backend=b, workload=wl) if p["qd"] > 1),
                            key=lambda p: (p["concurrency"], p["queues"])):
                if p["policy"] == "off":
                    continue
                pdus = p.get("target_pdus_sent") or 0
                secs = p.get("runtime_s") or meta["seconds_per_point"]
                lam = pdus / secs / p["queues"] if secs else 0  # per connection: one group each
                r2t = p["r2t_delay_us"]["count"]
                share = r2t / pdus if pdus else 0
                m = model(args.sens, lam, share) if lam > 0 and share > 0 else None
                if lam > 0 and share == 0:
                    m = model(args.sens, lam, 1e-6)
                ratio = "-"
                if p["policy"] == "semantic":
                    u = one(points, backend=b, workload=wl, qd=p["qd"], queues=p["queues"], policy="uniform")
                    if u and u["r2t_delay_us"]["count"] and p["r2t_delay_us"]["count"]:
                        ratio = f"{p['r2t_delay_us']['mean'] / max(u['r2t_delay_us']['mean'], 1e-9):.2f}"
                L.append(f"| {b} | {wl} | {p['queues']}x{p['qd']} | {p['policy']} | {fmt(lam)} | {share:.3f} | "
                         f"{fmt(p['target_pdus_per_flush'], 1)} | {fmt(m['eb_eff'], 1) if m else '-'} | "
                         f"{fmt(p['r2t_delay_us']['mean'], 1) if r2t else '-'} | {ratio} | "
                         f"{(f'{m[chr(82)]:.2f}' if m and p['policy'] == 'semantic' and share > 0 else '-')} |")
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reading.md")
    if os.path.exists(notes):
        L.append("\n" + open(notes).read())
    with open(args.docs, "w") as f:
        f.write("\n".join(L) + "\n")
    print(f"report: {len(points)} points -> {args.docs}, {args.out}/results.csv, {len(plots)} plots")


if __name__ == "__main__":
    main()
