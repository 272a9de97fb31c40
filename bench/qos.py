#!/usr/bin/env python3
"""QoS isolation: a noisy host and a quiet host on one `sens target` (one reactor, a RAM
namespace). The quiet host runs 4 KiB random reads at QD 4 paced to --quiet-iops; the noisy
host runs 4 KiB random reads and writes at QD 64 on --noisy-queues queues, at the same time.
Run twice: the noisy host unlimited, then limited live (`sens rpc qos_set --host NOISY
--total_iops N`). Reports the quiet host's IOPS and p99 (and the noisy host's IOPS) in both
cases as a Markdown table; --json writes the runs. Not a timed test: a short run shows it
works; numbers depend on the machine."""
import argparse
import json
import subprocess
import sys

from common import NQN, Target, add_common_arguments, perf_command, perf_summary

NOISY = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000001a"
QUIET = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000001b"


def perf_cmd(a, port, host, args):
    return perf_command(a, port, host, ["--size", "256M"] + args)


def run_case(a, port):
    noisy = subprocess.Popen(
        perf_cmd(a, port, NOISY, ["--rw", "randrw", "--bs", "4k", "--qd", "64", "--queues",
                                  str(a.noisy_queues)]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    quiet = subprocess.run(
        perf_cmd(a, port, QUIET, ["--rw", "randread", "--bs", "4k", "--qd", "4",
                                  "--rate-iops", str(a.quiet_iops)]),
        capture_output=True, text=True, timeout=120)
    nout, nerr = noisy.communicate(timeout=120)
    if quiet.returncode != 0 or noisy.returncode != 0:
        sys.exit(f"sens perf failed: {quiet.stderr}{nerr}")
    return {"quiet": perf_summary(quiet.stdout), "noisy": perf_summary(nout)}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    add_common_arguments(ap, time=2)
    ap.add_argument("--quiet-iops", type=int, default=2000)
    ap.add_argument("--noisy-queues", type=int, default=2)
    ap.add_argument("--limit", type=int, default=5000, help="the noisy host's total_iops")
    a = ap.parse_args()
    with Target(a.sens, ["--ns", "ram:1G"], rpc=True, prefix="sens-qos-bench-") as target:
        runs = {"no limit": run_case(a, target.port)}
        target.rpc("qos_set", "--nqn", NQN, "--host", NOISY, "--total_iops", str(a.limit))
        runs[f"noisy limited to {a.limit} IOPS"] = run_case(a, target.port)
        stats = json.loads(target.rpc("stats_get"))
    print(f"quiet host: 4 KiB randread QD4 at {a.quiet_iops} IOPS; noisy host: 4 KiB randrw "
          f"QD64 x {a.noisy_queues} queues; {a.time} s each\n")
    print("| case | quiet IOPS | quiet p99 (us) | noisy IOPS | errors |")
    print("|---|---:|---:|---:|---:|")
    for case, r in runs.items():
        print(f"| {case} | {r['quiet']['iops']:.0f} | {r['quiet']['p99_us']:.1f} | "
              f"{r['noisy']['iops']:.0f} | {r['quiet']['errors'] + r['noisy']['errors']} |")
    print(f"\ntarget qos counters: {json.dumps(stats['qos'])}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"runs": runs, "qos": stats["qos"], "args": vars(a)}, f, indent=2)


if __name__ == "__main__":
    main()
