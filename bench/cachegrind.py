#!/usr/bin/env python3
"""Simulated cache misses per I/O of `sens target`, naive vs tyche buffers (issue 12).

The target runs under `valgrind --tool=cachegrind` with its last-level cache set to the
geometry of one level of this machine's caches (cachegrind simulates D1 and one LL: run once
with LL = the L2, once with LL = the L3), while `sens perf` (not simulated, on the other core)
drives it over many connections. Each point is measured twice, with --time/4 and with --time
seconds of I/O: misses per I/O = (long - short misses) / (long - short I/Os), so the target's
start-up, connection set-up (the buffers' first touch) and shutdown cancel out and only the
steady state counts. Misses are data misses (reads + writes). Cachegrind sees virtual
addresses, so the colouring acts in full here whatever pages the kernel gave.

Prints a table and writes --json."""
import argparse
import json
import os
import re
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


def sysfs_level(level):
    """(size, ways, line) of cpu0's data/unified cache at `level`, or None."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    for i in range(16):
        d = f"{base}/index{i}"
        try:
            if open(f"{d}/type").read().strip() == "Instruction":
                continue
            if int(open(f"{d}/level").read()) != level:
                continue
            size = open(f"{d}/size").read().strip()
            size = int(size[:-1]) * 1024 if size.endswith("K") else int(size)
            return (size, int(open(f"{d}/ways_of_associativity").read()),
                    int(open(f"{d}/coherency_line_size").read()))
        except (OSError, ValueError):
            return None
    return None


def cachegrind_geometry(size, ways, line):
    """Cachegrind needs a power-of-two number of sets: round the size down to one."""
    sets = size // (ways * line)
    p = 1
    while p * 2 <= sets:
        p *= 2
    return p * ways * line, ways, line


def run_once(args, seconds, layout, ll, conns, qd, rw, bs):
    """(cachegrind event totals, I/Os perf completed) of one target run."""
    port = free_port()
    out = tempfile.mktemp(prefix="sens-cg-", suffix=".out")
    perf_json = tempfile.mktemp(prefix="sens-cg-", suffix=".json")
    cmd = ["taskset", "-c", "0", "valgrind", "--tool=cachegrind", "--cache-sim=yes",
           f"--LL={ll[0]},{ll[1]},{ll[2]}", f"--cachegrind-out-file={out}",
           args.sens, "target", "--listen", f"127.0.0.1:{port}", "--discovery-port", "0",
           "--ns", args.ns, "--max-io-queues", str(max(64, conns)), "--buffers", layout,
           "--poll", "off", "-q"] + (["--receive-budget", args.receive_budget]
                                   if layout == "tyche" and args.receive_budget else [])
    log = open(out + ".log", "w")
    target = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                time.sleep(0.2)
        perf = subprocess.run(
            ["taskset", "-c", "1", args.sens, "perf", "-r",
             f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN}", "--rw", rw, "--bs", bs,
             "--queues", str(conns), "--qd", str(qd), "--time", str(seconds), "--size", "64M",
             "--poll", "off", "--connect-timeout", "60000", "-q", "--json", perf_json]
            + (["--data-digest"] if args.data_digest else []),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=seconds + 300)
        if perf.returncode != 0:
            raise RuntimeError(f"sens perf failed: {perf.stderr.strip()}")
        ios = json.load(open(perf_json))["total_ios"]
    finally:
        target.send_signal(signal.SIGINT)
        target.wait(timeout=120)
        log.close()
    text = open(out).read()
    events = re.search(r"^events: (.*)$", text, re.M).group(1).split()
    summary = [int(x) for x in re.search(r"^summary: (.*)$", text, re.M).group(1).split()]
    ev = dict(zip(events, summary))
    if args.keep:  # for cg_annotate: where the misses are, by function
        os.makedirs(args.keep, exist_ok=True)
        os.replace(out, os.path.join(args.keep, f"cachegrind.{layout}.{rw}{bs}.{conns}c."
                                                 f"{ll[0] >> 10}k.{seconds:g}s.out"))
    for f in (out, out + ".log", perf_json):
        if os.path.exists(f):
            os.unlink(f)
    return ev, ios


def run_point(args, layout, level_name, ll, conns, qd, rw, bs):
    short_ev, short_ios = run_once(args, args.time / 4, layout, ll, conns, qd, rw, bs)
    long_ev, long_ios = run_once(args, args.time, layout, ll, conns, qd, rw, bs)
    ios = long_ios - short_ios
    if ios <= 0:
        raise RuntimeError(f"the long run did no more I/O than the short one ({long_ios} vs "
                           f"{short_ios}): raise --time")

    def per_io(*names):
        return sum(long_ev[n] - short_ev[n] for n in names) / ios

    return {"layout": layout, "level": level_name, "ll": list(ll), "connections": conns, "qd": qd,
            "rw": rw, "bs": bs, "ios": ios, "short_ios": short_ios, "long_ios": long_ios,
            "d1_misses_per_io": per_io("D1mr", "D1mw"),
            "ll_misses_per_io": per_io("DLmr", "DLmw"),
            "ll_read_misses_per_io": per_io("DLmr"),
            "data_refs_per_io": per_io("Dr", "Dw"),
            "instructions_per_io": per_io("Ir")}


def ratio(a, b):
    # Below a twentieth of a miss per I/O a ratio says nothing.
    return f"{a / b:.2f}" if b >= 0.05 else "- (naive ~0)"


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sens", default="build/sens")
    ap.add_argument("--time", type=float, default=20, help="seconds of I/O per point")
    ap.add_argument("--connections", default="32,128")
    ap.add_argument("--json", default="bench/out/cachegrind.json")
    ap.add_argument("--ns", default="ram:256M",
                    help="the target's namespace: ram (the payload is copied to and from it: "
                    "its own misses), or null (only the buffers are touched)")
    ap.add_argument("--data-digest", action="store_true",
                    help="data digests on: the target reads every payload byte it receives "
                    "(CRC32C), as a stack processing received data does")
    ap.add_argument("--receive-budget", default="",
                    help="tyche's in-flight receive budget (default: the target's, from the caches)")
    ap.add_argument("--workloads", default="randread:4k,randwrite:16k")
    ap.add_argument("--keep", default="", help="keep the cachegrind.out files in this folder")
    ap.add_argument("--quick", action="store_true", help="one short point per layout")
    args = ap.parse_args()
    levels = []
    for n, fallback in ((2, (1 << 20, 16, 64)), (3, (32 << 20, 16, 64))):
        g = sysfs_level(n) or fallback
        levels.append((f"L{n}", cachegrind_geometry(*g)))
    shapes = [tuple(w.split(":")) for w in args.workloads.split(",")]
    conns = [int(c) for c in args.connections.split(",")]
    if args.quick:
        args.time, conns, shapes, levels = 4, [conns[0]], shapes[:1], levels[:1]
    rows = []
    print(f"{'workload':<16} {'conns':>5} {'LL = ':>6}{'':<22} {'naive':>12} {'tyche':>12}  "
          f"(simulated misses per I/O: D1 / LL)")
    for rw, bs in shapes:
        for c in conns:
            qd = max(1, 128 // c)
            for name, ll in levels:
                pair = {}
                for layout in ("naive", "tyche"):
                    r = run_point(args, layout, name, ll, c, qd, rw, bs)
                    rows.append(r)
                    pair[layout] = r
                n, t = pair["naive"], pair["tyche"]
                print(f"{rw + ' ' + bs:<16} {c:>5} {name} {ll[0] >> 10} KiB {ll[1]}-way     "
                      f"{n['d1_misses_per_io']:6.1f}/{n['ll_misses_per_io']:5.1f} "
                      f"{t['d1_misses_per_io']:6.1f}/{t['ll_misses_per_io']:5.1f}  "
                      f"LL tyche/naive {ratio(t['ll_misses_per_io'], n['ll_misses_per_io'])}",
                      flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"ns": args.ns, "data_digest": args.data_digest, "time_s": args.time,
                   "receive_budget": args.receive_budget,
                   "points": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
