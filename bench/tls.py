#!/usr/bin/env python3
"""What TLS costs: `sens perf` against `sens target` on a RAM namespace, plain TCP against TLS
1.3 (TLS_AES_128_GCM_SHA256 and TLS_AES_256_GCM_SHA384 PSKs), for 4 KiB random reads at QD 32
and 16 KiB random writes (R2T) at QD 8, one queue. The target is pinned to core 0 and the host
to core 1; runs are interleaved (plain, TLS-128, TLS-256, plain, ...) and the median of
--reps is reported, with the TLS/plain ratio. The 256 MiB the runs address are written once
first: reads come from real memory, not from the kernel's zero page (always in cache). The
ceilings' reads come from a region of the same size (sens_limit --span). Prints a Markdown
table; --json writes the runs."""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from common import by_placement, core_round_trip, free_port, nvme_tls_key, spread_text

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NQN = "nqn.2026-11.io.sens-target:ram0"
WORKLOADS = [("4 KiB randread QD32", ["--rw", "randread", "--bs", "4k", "--qd", "32"]),
             ("16 KiB randwrite QD8", ["--rw", "randwrite", "--bs", "16k", "--qd", "8"])]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sens", default=os.path.join(ROOT, "build", "sens"))
    ap.add_argument("--time", type=float, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--limit", default=None,
                    help="sens_limit binary for the ceilings (default: beside --sens; 'none': skip)")
    ap.add_argument("--aes-gcm", default="auto",
                    help="who computes AES-GCM on both sides and in the ceiling: auto, ipsec-mb, "
                         "openssl (--tls-aes-gcm)")
    ap.add_argument("--records", default="auto",
                    help="who protects TLS records on both sides: auto (the kernel's kTLS where "
                         "it has the tls module, else sens), kernel, sens (--tls-records)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.limit is None:
        a.limit = os.path.join(os.path.dirname(os.path.abspath(a.sens)), "sens_limit")
    work = tempfile.mkdtemp(prefix="sens-tls-bench-")
    keys = {"TLS_AES_128_GCM_SHA256": nvme_tls_key(1), "TLS_AES_256_GCM_SHA384": nvme_tls_key(2)}
    files = {}
    for name, key in keys.items():
        files[name] = os.path.join(work, name)
        open(files[name], "w").write(key + "\n")
    allkeys = os.path.join(work, "all")
    open(allkeys, "w").write("\n".join(keys.values()) + "\n")
    plain, tls = free_port(), free_port()
    target = subprocess.Popen(
        ["taskset", "-c", "0", a.sens, "target", "--listen", f"127.0.0.1:{plain}", "--tls-listen",
         f"127.0.0.1:{tls}", "--tls", allkeys, "--discovery-port", "0", "--ns", "ram:1G", "--tls-aes-gcm", a.aes_gcm, "--tls-records", a.records, "-q"],
        stdout=open(os.path.join(work, "target.log"), "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", tls), timeout=1).close()
            break
        except OSError:
            time.sleep(0.1)
    modes = [("plain TCP", plain, None)] + [(n, tls, f) for n, f in files.items()]
    runs, headers = [], []
    try:
        trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{plain} subnqn:{NQN}"
        fill = subprocess.run([a.sens, "perf", "-r", trid, "--rw", "write", "--bs", "128k", "--qd",
                               "8", "--size", "256M", "--prefill", "--time", "0.2", "-q"],
                              capture_output=True, text=True, timeout=300)
        if fill.returncode != 0:
            sys.exit(f"the prefill failed: {fill.stderr}{fill.stdout}")
        for wl_name, wl in WORKLOADS:
            for rep in range(a.reps):
                for mode, port, f in modes:
                    link = core_round_trip(a.limit) if a.limit != "none" else None
                    trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN}"
                    cmd = ["taskset", "-c", "1", a.sens, "perf", "-r", trid, "--time", str(a.time),
                           "--warmup", "0.5", "-q", "--size", "256M", "--json", "-"] + wl
                    if f:
                        cmd += ["--tls", f, "--tls-aes-gcm", a.aes_gcm, "--tls-records", a.records]
                    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
                    if out.returncode != 0:
                        sys.exit(f"{mode} {wl_name}: sens perf failed: {out.stderr}{out.stdout}")
                    for line in out.stdout.splitlines():  # which records each connection got
                        if line.startswith("TLS 1.3, records") and line not in headers:
                            headers.append(line)
                    j = json.loads(out.stdout[out.stdout.index("{"):])
                    job = j["jobs"][0]
                    iops = job["read"]["iops"] + job["write"]["iops"]
                    runs.append({"workload": wl_name, "mode": mode, "rep": rep, "iops": iops,
                                 "host_cpu": job.get("usr_cpu", 0) + job.get("sys_cpu", 0),
                                 "core_round_trip_ns": link})
    finally:
        target.terminate()
        target.wait(timeout=10)
    ceilings = limit_ceilings(a) if a.limit != "none" else {}
    for line in open(os.path.join(work, "target.log")):  # (complete once the target exited)
        if "TLS 1.3" in line:
            print(line.strip().replace("listening on", "target: TLS listener on") + "\n")
    for line in headers:
        print("host: " + line + "\n")
    print("| workload | plain TCP kIOPS | TLS_AES_128_GCM_SHA256 kIOPS (ratio) | "
          "TLS_AES_256_GCM_SHA384 kIOPS (ratio) |")
    print("|---|---|---|---|")
    for wl_name, _ in WORKLOADS:
        med = {m: statistics.median(r["iops"] for r in runs
                                    if r["workload"] == wl_name and r["mode"] == m)
               for m, _, _ in modes}
        cells = [f"{med['plain TCP'] / 1e3:.1f}"]
        for name in files:
            cells.append(f"{med[name] / 1e3:.1f} ({med[name] / med['plain TCP']:.2f})")
        print(f"| {wl_name} | " + " | ".join(cells) + " |")
    if any(r["core_round_trip_ns"] for r in runs):
        print_rep_ratios(runs, a.reps, [m for m, _, _ in modes])
    if ceilings:
        print("\nCeilings (`sens_limit --security none|tls`, the same shapes and TLS records with no "
              "NVMe work, reads from a 256 MiB region, same cores, medians):\n")
        print("| workload | limit plain kIOPS | limit TLS kIOPS (ratio) | sens plain / limit plain | "
              "sens TLS-128 / limit TLS |")
        print("|---|---|---|---|---|")
        for wl_name, _ in WORKLOADS:
            lp, lt = ceilings[wl_name]["none"], ceilings[wl_name]["tls"]
            sp = statistics.median(r["iops"] for r in runs
                                   if r["workload"] == wl_name and r["mode"] == "plain TCP")
            st = statistics.median(r["iops"] for r in runs if r["workload"] == wl_name and
                                   r["mode"] == "TLS_AES_128_GCM_SHA256")
            print(f"| {wl_name} | {lp / 1e3:.1f} | {lt / 1e3:.1f} ({lt / lp:.2f}) | {sp / lp:.2f} | "
                  f"{st / lt:.2f} |")
    if a.json:
        json.dump({"runs": runs, "ceilings": ceilings}, open(a.json, "w"), indent=2)


def print_rep_ratios(runs, reps, modes):
    """Each rep's TLS / plain ratios, grouped by where the two cores were during the rep's runs
    (the machine's speed flips with it: a ratio across a flip means nothing)."""
    print("\nEach rep's own ratio to plain TCP, grouped by where the cores were during its runs "
          "(`sens_limit --core-round-trip` before each run; near: within 2.5x of the smallest; "
          "reps whose placement changed are left out): median (range), reps\n")
    print("| workload | " + " | ".join(f"{m} / plain, cores {where}" for where in ("near", "far")
                                       for m in modes[1:]) + " | core round trip ns |")
    print("|---|" + "---:|" * (2 * (len(modes) - 1)) + "---|")
    links = [r["core_round_trip_ns"] for r in runs if r["core_round_trip_ns"]]
    nearest = min(links)
    for wl_name in dict.fromkeys(r["workload"] for r in runs):
        by = {(r["rep"], r["mode"]): r for r in runs if r["workload"] == wl_name}
        cells = {}
        for m in modes[1:]:
            cells[m] = by_placement(
                [([by[(k, x)]["core_round_trip_ns"] for x in modes],
                  by[(k, m)]["iops"] / by[(k, modes[0])]["iops"]) for k in range(reps)], nearest)
        row = [spread_text(cells[m][where]) for where in ("near", "far") for m in modes[1:]]
        wl_links = [r["core_round_trip_ns"] for r in by.values() if r["core_round_trip_ns"]]
        print(f"| {wl_name} | " + " | ".join(row) +
              f" | {min(wl_links):.0f}-{max(wl_links):.0f} |")


def limit_ceilings(a):
    """sens_limit's IOPS for each workload, plain and TLS, median of --reps (alternated)."""
    out = {}
    for wl_name, wl in WORKLOADS:
        opts = dict(zip(wl[0::2], wl[1::2]))
        rw = "write" if "write" in opts["--rw"] else "read"
        got = {"none": [], "tls": []}
        for _ in range(a.reps):
            for sec in got:
                span = ["--span", "256M"] if rw == "read" else []
                r = subprocess.run([a.limit, "--rw", rw, "--bs", opts["--bs"], "--qd", opts["--qd"],
                                    "--time", str(a.time), "--security", sec, "--json", "-",
                                    "-q", "--tls-aes-gcm", a.aes_gcm] + span, capture_output=True, text=True, timeout=120)
                if r.returncode != 0:
                    sys.exit(f"sens_limit --security {sec} failed: {r.stderr}")
                got[sec].append(json.loads(r.stdout)["iops"])
        out[wl_name] = {k: statistics.median(v) for k, v in got.items()}
    return out


if __name__ == "__main__":
    main()
