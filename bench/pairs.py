#!/usr/bin/env python3
"""Alternated pairs: two `sens target` binaries (or one binary with two option sets) served side
by side on core 0, one idle while the other is measured, and `sens perf` on core 1 running one
short run against each in turn, --pairs times (the order alternates). Each pair's B/A ratio is
taken seconds apart, in the same placement of the vCPUs most of the time, so the machine's 2x
swings (bench/plain_limit.py says why) cancel within a pair; a pair that straddles a move is an
outlier, which the median of many pairs ignores. With 0.5 s runs and 40 pairs a difference of
about 3 % shows (this is what the A/B figures in the commit messages use).

Both targets serve a RAM namespace whose first --size bytes are written once first, so reads
come from memory and not from the kernel's zero page.

  bench/pairs.py --a OLD/sens --b build/sens -- --rw randread --bs 4k --qd 32
  bench/pairs.py --b-args '--pg-pdus 32' -- --rw randread --bs 4k --qd 32 --queues 4
  bench/pairs.py --perf-b-args '--pg-bytes 64k' -- --rw randwrite --bs 128k --qd 8
  bench/pairs.py --tls 1 --a OLD/sens -- --rw randread --bs 4k --qd 32

The host varies the same way (--perf-a/--perf-b, --perf-a-args/--perf-b-args): A's host always
runs against target A and B's against target B, so with the targets left alike only the host
differs.

Prints every pair and the median of B/A over all pairs and over those within 15 % of 1."""
import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import ROOT, free_port, nvme_tls_key, pinned_perf  # noqa: E402


def start_target(binary, extra, ns, work, name, key=None):
    """A target on core 0: (process, plain port, TLS port or None)."""
    port, tls_port = free_port(), free_port() if key else None
    tls = ["--tls-listen", f"127.0.0.1:{tls_port}", "--tls", key] if key else []
    log = os.path.join(work, f"{name}.log")
    proc = subprocess.Popen(
        ["taskset", "-c", "0", binary, "target", "--listen", f"127.0.0.1:{port}",
         "--discovery-port", "0", "--rpc", "none", "--pin", "0", "--ns", ns, *tls, *extra],
        stdout=open(log, "w"), stderr=subprocess.STDOUT)
    deadline = time.time() + 30
    while open(log).read().count("listening on") < (2 if key else 1):
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            raise SystemExit(f"target {name} ({binary}) did not start:\n{open(log).read()}")
        time.sleep(0.1)
    return proc, port, tls_port


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    default = os.path.join(ROOT, "build", "sens")
    ap.add_argument("--a", default=default, help="target binary A (default build/sens)")
    ap.add_argument("--b", default=default, help="target binary B (default build/sens)")
    ap.add_argument("--a-args", default="", help="extra `sens target` options for A")
    ap.add_argument("--b-args", default="", help="extra `sens target` options for B")
    ap.add_argument("--perf", default=default, help="the `sens perf` binary (default build/sens)")
    ap.add_argument("--perf-a", default=None, help="`sens perf` binary for A (default --perf)")
    ap.add_argument("--perf-b", default=None, help="`sens perf` binary for B (default --perf)")
    ap.add_argument("--perf-a-args", default="", help="extra `sens perf` options for A")
    ap.add_argument("--perf-b-args", default="", help="extra `sens perf` options for B")
    ap.add_argument("--pairs", type=int, default=40)
    ap.add_argument("--time", type=float, default=0.5, help="seconds of each run (default 0.5)")
    ap.add_argument("--size", default="256M", help="namespace size and I/O span (default 256M)")
    ap.add_argument("--json", default=None, help="write the runs to this file")
    ap.add_argument("--tls", type=int, choices=(1, 2), default=None,
                    help="measure over TLS 1.3 with a PSK: 1 TLS_AES_128_GCM_SHA256, "
                    "2 TLS_AES_256_GCM_SHA384 (needs nvme-cli for the key)")
    ap.add_argument("workload", nargs="*", help="sens perf options after --, default: "
                    "--rw randread --bs 4k --qd 32")
    a = ap.parse_args()
    if a.pairs < 1 or a.time <= 0:
        raise SystemExit("--pairs and --time must be positive")
    workload = a.workload or ["--rw", "randread", "--bs", "4k", "--qd", "32"]
    hosts = [(a.perf_a or a.perf, shlex.split(a.perf_a_args)),
             (a.perf_b or a.perf, shlex.split(a.perf_b_args))]
    if "--size" not in workload:
        workload += ["--size", a.size]
    kind = "write" if any(w in ("write", "randwrite") for w in workload) else "read"
    work = tempfile.mkdtemp(prefix="sens-pairs-")
    key = None
    if a.tls:
        key = os.path.join(work, "tls.key")
        with open(key, "w") as f:
            f.write(nvme_tls_key(a.tls) + "\n")
        workload += ["--tls", key]
    targets = []
    try:
        for name, binary, extra in (("A", a.a, a.a_args), ("B", a.b, a.b_args)):
            targets.append(start_target(binary, shlex.split(extra), f"ram:{a.size}", work, name,
                                        key))
        for _, port, _ in targets:
            pinned_perf(a.perf, port, ["--rw", "write", "--bs", "128k", "--qd", "8", "--size",
                                       a.size, "--prefill", "--time", "0.2"])
        iops = {0: [], 1: []}
        for p in range(a.pairs):
            for i in ((0, 1) if p % 2 == 0 else (1, 0)):
                perf, extra = hosts[i]
                port = targets[i][2] if a.tls else targets[i][1]
                j = pinned_perf(perf, port, workload + extra + ["--time", str(a.time)])
                iops[i].append(j["jobs"][0][kind]["iops"])
            print(f"pair {p + 1}: A {iops[0][-1] / 1e3:.1f}k B {iops[1][-1] / 1e3:.1f}k "
                  f"B/A {iops[1][-1] / iops[0][-1]:.3f}", flush=True)
    finally:
        for proc, _, _ in targets:
            proc.terminate()
            proc.wait()
    ratios = [b / x for x, b in zip(iops[0], iops[1])]
    inner = [r for r in ratios if 0.85 < r < 1.15]
    shown = workload[:-2] + [f"(TLS, key --hmac={a.tls})"] if a.tls else workload
    print(f"\n{' '.join(shown)}: B/A median {statistics.median(ratios):.3f} over "
          f"{len(ratios)} pairs", end="")
    if inner:
        print(f"; {len(inner)} pairs within 15 %: median {statistics.median(inner):.3f}")
    else:
        print()
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"a": a.a, "b": a.b, "a_args": a.a_args, "b_args": a.b_args,
                       "perf_a": hosts[0][0], "perf_b": hosts[1][0],
                       "perf_a_args": a.perf_a_args, "perf_b_args": a.perf_b_args,
                       "workload": workload, "time": a.time, "iops_a": iops[0],
                       "iops_b": iops[1], "ratios": ratios}, f, indent=1)


if __name__ == "__main__":
    main()
