#!/usr/bin/env python3
"""Plain TCP against its ceiling (issue 31's goal: at least 0.8x of sens_limit at the same
shape): `sens perf` 4 KiB random reads over 256 MiB of a RAM namespace (written once first,
so that reads come from real memory and not the kernel's zero page) at 1 x QD32, 1 x QD128
and 4 x QD32, against `sens_limit` at the same shapes twice: answering from one 4 KiB block
(always in cache: the old ceiling) and with --span 256M (each answer from a random block of a
256 MiB region, as the namespace's reads are). Target and limit target on core 0, hosts on
core 1; the three runs of a shape alternate (sens, then the span ceiling right after it, then
the one-block one), --reps times, medians reported, and the median (and range) of each rep's
own sens / span ratio: this machine's speed swings between minutes, and two runs seconds apart
see the same phase. That phase is mostly where the hypervisor put the two vCPUs (one chiplet
or two: `sens_limit --core-round-trip`, tens or hundreds of ns); it is measured before each
sens run and by each ceiling run, and each rep's ratio is reported with the reps of its
placement: near (all three within 2.5x of the smallest round trip of the bench) or far (all
beyond); a rep whose placement changed is left out. Prints Markdown; --json writes every run."""
import argparse
import json
import os
import statistics
import subprocess
import sys

from common import (Target, add_common_arguments, by_placement, core_round_trip, pinned_perf,
                    spread_text)

SHAPES = [(1, 32), (1, 128), (4, 32)]
SPAN = "256M"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    add_common_arguments(ap, time=3)
    ap.add_argument("--limit", default=None, help="sens_limit binary (default: beside --sens)")
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    if a.reps < 1 or a.time <= 0:
        sys.exit("--reps must be >= 1 and --time > 0")
    limit = a.limit or os.path.join(os.path.dirname(os.path.abspath(a.sens)), "sens_limit")
    runs = []

    def ceiling(queues, qd, span):
        cmd = [limit, "--rw", "read", "--bs", "4k", "--qd", str(qd), "--queues", str(queues),
               "--time", str(a.time), "--span", span, "--json", "-", "-q"]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.time + 120)
        if r.returncode != 0:
            sys.exit(f"sens_limit failed: {r.stderr}")
        j = json.loads(r.stdout)
        return j["iops"], j["core_round_trip_ns"]

    with Target(a.sens, ["--ns", "ram:1G"], rpc=True, prefix="sens-plain-limit-",
                core=0) as target:
        pinned_perf(a.sens, target.port, ["--rw", "write", "--bs", "128k", "--qd", "8", "--size",
                                          SPAN, "--prefill", "--time", "0.2"])
        for rep in range(a.reps):
            for queues, qd in SHAPES:
                shape = f"{queues} x QD{qd}"
                link = core_round_trip(limit)
                job = pinned_perf(a.sens, target.port,
                                  ["--rw", "randread", "--bs", "4k", "--qd", str(qd), "--queues",
                                   str(queues), "--size", SPAN, "--time", str(a.time)])
                runs.append({"shape": shape, "rep": rep, "what": "sens", "iops": job["iops"],
                             "core_round_trip_ns": link})
                for span in (SPAN, "0"):  # (the span ceiling next to sens's run)
                    iops, link = ceiling(queues, qd, span)
                    runs.append({"shape": shape, "rep": rep, "what": f"limit span {span}",
                                 "iops": iops, "core_round_trip_ns": link})

    def med(shape, what):
        return statistics.median(r["iops"] for r in runs if r["shape"] == shape and
                                 r["what"] == what)

    print(f"4 KiB random reads over {SPAN}, target core 0, host core 1, medians of {a.reps}\n")
    nearest = min((r["core_round_trip_ns"] for r in runs if r["core_round_trip_ns"]), default=0)

    def rep_ratios(shape):
        """Each rep's sens / span ratio, grouped by where the cores were during its three runs."""
        by = {(r["rep"], r["what"]): r for r in runs if r["shape"] == shape}
        reps = []
        for k in range(a.reps):
            three = [by[(k, w)] for w in ("sens", f"limit span {SPAN}", "limit span 0")]
            reps.append(([r["core_round_trip_ns"] for r in three],
                         three[0]["iops"] / three[1]["iops"]))
        return by_placement(reps, nearest)

    print("| shape | sens kIOPS | limit, one block kIOPS | sens / it | limit, span "
          f"{SPAN} kIOPS | sens / it | each rep's sens / span, cores near: median (range), reps "
          "| the same, cores far |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for queues, qd in SHAPES:
        shape = f"{queues} x QD{qd}"
        s, one, span = med(shape, "sens"), med(shape, "limit span 0"), med(shape, f"limit span {SPAN}")
        groups = rep_ratios(shape)
        print(f"| {shape} | {s / 1e3:.1f} | {one / 1e3:.1f} | {s / one:.2f} | {span / 1e3:.1f} | "
              f"{s / span:.2f} | {spread_text(groups['near'])} | {spread_text(groups['far'])} |")
    links = [r["core_round_trip_ns"] for r in runs if r["core_round_trip_ns"]]
    if links:
        print(f"\nCore round trips {min(links):.0f}-{max(links):.0f} ns (near: up to "
              f"{2.5 * nearest:.0f}); reps whose placement changed are in neither column.")
    if a.json:
        json.dump({"runs": runs}, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
