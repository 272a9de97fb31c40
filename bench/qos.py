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
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NQN = "nqn.2026-11.io.sens-target:ram0"
NOISY = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000001a"
QUIET = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000001b"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def perf_cmd(a, port, host, args):
    trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN} hostnqn:{host}"
    return [a.sens, "perf", "-r", trid, "--time", str(a.time), "--warmup", "0.3", "-q",
            "--size", "256M", "--json", "-"] + args


def summary(out):
    j = json.loads(out[out.index("{"):])
    return {"iops": j["iops"], "p99_us": j["clat_ns"]["percentile"]["99.000000"] / 1e3,
            "errors": j["errors"]}


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
    return {"quiet": summary(quiet.stdout), "noisy": summary(nout)}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sens", default=os.path.join(ROOT, "build", "sens"))
    ap.add_argument("--time", type=float, default=2)
    ap.add_argument("--quiet-iops", type=int, default=2000)
    ap.add_argument("--noisy-queues", type=int, default=2)
    ap.add_argument("--limit", type=int, default=5000, help="the noisy host's total_iops")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sens-qos-bench-")
    sock = os.path.join(work, "rpc.sock")
    port = free_port()
    target = subprocess.Popen(
        [a.sens, "target", "--listen", f"127.0.0.1:{port}", "--discovery-port", "0", "--ns",
         "ram:1G", "--rpc", sock, "-q"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    rpc = [a.sens, "rpc", "--socket", sock]
    try:
        subprocess.run(rpc + ["--wait", "10", "framework_wait_init"], check=True,
                       capture_output=True)
        runs = {"no limit": run_case(a, port)}
        subprocess.run(rpc + ["qos_set", "--nqn", NQN, "--host", NOISY, "--total_iops",
                              str(a.limit)], check=True, capture_output=True)
        runs[f"noisy limited to {a.limit} IOPS"] = run_case(a, port)
        stats = json.loads(subprocess.run(rpc + ["stats_get"], check=True, capture_output=True,
                                          text=True).stdout)
    finally:
        target.terminate()
        target.wait(timeout=30)
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
