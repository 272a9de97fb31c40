#!/usr/bin/env python3
"""What the span of random reads costs on a RAM namespace (page tables, TLB, caches): `sens
perf` 4 KiB random reads at QD 32 over the whole of a 1 GiB namespace against the same over its
first 64 MiB, after one full write (so every block is real memory, not the zero page). Target
on core 0, host on core 1; runs alternate and the median of --reps is reported with the ratio
(goal: 1 GiB at least 0.9x of 64 MiB). Also prints the target's `pages:` start-up line and,
from stats_get after the write, how much of the namespace the kernel put on huge pages.
Prints Markdown; --json writes every run."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from common import add_common_arguments, free_port, pinned_perf

SPANS = ["1G", "64M"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    add_common_arguments(ap, time=3)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if a.reps < 1 or a.time <= 0:
        sys.exit("--reps must be >= 1 and --time > 0")
    work = tempfile.mkdtemp(prefix="sens-ram-span-")
    sock = os.path.join(work, "rpc.sock")
    out_path = os.path.join(work, "target.out")
    port = free_port()
    with open(out_path, "w") as out:
        target = subprocess.Popen(
            ["taskset", "-c", "0", a.sens, "target", "--listen", f"127.0.0.1:{port}",
             "--discovery-port", "0", "--rpc", sock, "--ns", "ram:1G"],
            stdout=out, stderr=subprocess.STDOUT, text=True)
    runs = []
    try:
        deadline = time.time() + 10
        while "management:" not in open(out_path).read():
            if time.time() > deadline or target.poll() is not None:
                sys.exit(f"sens target did not start: {open(out_path).read()}")
            time.sleep(0.1)
        pages_line = next((ln.strip() for ln in open(out_path) if ln.strip().startswith("pages:")),
                          "(no pages line)")

        def perf(args):
            return pinned_perf(a.sens, port, args)

        perf(["--rw", "write", "--bs", "128k", "--qd", "8", "--size", "1G", "--prefill",
              "--time", "0.2"])
        stats = subprocess.run([a.sens, "rpc", "--socket", sock, "stats_get"],
                               capture_output=True, text=True, timeout=30)
        pages = json.loads(stats.stdout)["namespaces"][0].get("pages", {})
        for rep in range(a.reps):
            for span in SPANS:
                job = perf(["--rw", "randread", "--bs", "4k", "--qd", "32", "--size", span,
                            "--time", str(a.time)])["jobs"][0]
                runs.append({"span": span, "rep": rep, "iops": job["read"]["iops"]})
    finally:
        target.terminate()
        target.wait(timeout=10)
    med = {s: statistics.median(r["iops"] for r in runs if r["span"] == s) for s in SPANS}
    print(f"target: {pages_line}")
    print(f"after writing 1 GiB: {pages.get('huge_bytes', 0) / 2**20:.0f} MiB of "
          f"{pages.get('resident_bytes', 0) / 2**20:.0f} MiB resident on huge pages")
    print()
    print("| 4 KiB randread QD32 | over 64 MiB kIOPS | over 1 GiB kIOPS | 1 GiB / 64 MiB |")
    print("|---|---|---|---|")
    print(f"| median of {a.reps} | {med['64M'] / 1e3:.1f} | {med['1G'] / 1e3:.1f} | "
          f"{med['1G'] / med['64M']:.2f} |")
    if a.json:
        json.dump({"pages": pages, "runs": runs}, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
