#!/usr/bin/env python3
"""Instructions per I/O of `sens target`'s own code (user space: sens and libc), counted by
`valgrind --tool=callgrind`: a figure that does not move with this machine's 2x speed swings
(where its vCPUs are placed), so a change of a few percent in sens's per-I/O code shows in one
run, where timed A/B pairs need dozens.

The target runs under callgrind on a RAM namespace, collecting only inside its reactor passes
(`--toggle-collect=sens::Reactor::run_once*`: not start-up, not the management thread), while
`sens perf` (native) drives it for --time seconds; instructions per I/O = the pass total over
the I/Os perf completed. The kernel's work (TCP, the payload copy) is not counted: see
bench/cpu_per_io.py for where the time goes. With --baseline, the same run for a second binary
and each function's change.

Prints Markdown; --json writes the counts."""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import NQN, ROOT, free_port  # noqa: E402


def count(sens, perf, workload, seconds, ns):
    """{'ios', 'total', 'functions': {name: instructions}} of one run of `sens` under callgrind."""
    work = tempfile.mkdtemp(prefix="sens-instructions-")
    out, log, summary = (os.path.join(work, n) for n in ("callgrind.out", "target.log", "perf.json"))
    port = free_port()
    target = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
         "--toggle-collect=sens::Reactor::run_once*", sens, "target", "--listen",
         f"127.0.0.1:{port}", "--discovery-port", "0", "--ns", ns, "-q", "--rpc", "none"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 60
        while "listening on" not in open(log).read():
            if target.poll() is not None or time.time() > deadline:
                raise SystemExit(f"the target under valgrind did not start:\n{open(log).read()}")
            time.sleep(0.2)
        remote = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN}"
        run = subprocess.run([perf, "perf", "-r", remote, *workload, "--time", str(seconds),
                              "--json", summary, "-q"], capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"sens perf failed: {run.stderr.strip()}")
    finally:
        target.send_signal(signal.SIGINT)
        target.wait()
    jobs = json.load(open(summary))["jobs"][0]
    ios = jobs["read"]["total_ios"] + jobs["write"]["total_ios"]
    report = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", out],
                            capture_output=True, text=True).stdout
    total, functions, listing = 0, {}, False
    for line in report.splitlines():
        if "PROGRAM TOTALS" in line:
            total = int(line.split()[0].replace(",", ""))
            continue
        if line.startswith("Ir") and "file:function" in line:
            listing = True  # the per-function table follows
            continue
        fields = line.split(None, 1)
        if not listing:
            continue
        if len(fields) < 2 or not fields[0].replace(",", "").isdigit():
            continue
        n = int(fields[0].replace(",", ""))
        name = fields[1].split(") ", 1)[-1] if fields[1].startswith("(") else fields[1]
        name = name.split(" [", 1)[0]  # drop the object file
        name = name.split(":", 1)[-1] if ":sens::" in name or ":std::" in name else name
        functions[name] = functions.get(name, 0) + n
    if ios == 0 or total == 0:
        raise SystemExit("no I/O completed, or callgrind counted nothing")
    return {"ios": ios, "total": total, "functions": functions}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sens", default=os.path.join(ROOT, "build", "sens"),
                    help="the target binary measured (default: build/sens)")
    ap.add_argument("--baseline", help="a second target binary, measured the same way")
    ap.add_argument("--perf", default=None, help="the `sens perf` binary (default: --sens)")
    ap.add_argument("--rw", default="randread", help="sens perf --rw (default randread)")
    ap.add_argument("--bs", default="4k")
    ap.add_argument("--qd", type=int, default=32)
    ap.add_argument("--queues", type=int, default=4)
    ap.add_argument("--ns", default="ram:64M", help="the target's namespace (default ram:64M)")
    ap.add_argument("--time", type=float, default=4,
                    help="seconds of I/O (the target runs about 15x slower under valgrind)")
    ap.add_argument("--top", type=int, default=15, help="functions listed (default 15)")
    ap.add_argument("--json", default=None, help="write the counts to this file")
    a = ap.parse_args()
    for tool in ("valgrind", "callgrind_annotate"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            raise SystemExit(f"{tool} is needed (Debian package valgrind)")
    if a.qd < 1 or a.queues < 1 or a.time <= 0:
        raise SystemExit("--qd, --queues and --time must be positive")
    size = a.ns.split(":", 1)[1] if ":" in a.ns else "64M"
    workload = ["--rw", a.rw, "--bs", a.bs, "--qd", str(a.qd), "--queues", str(a.queues),
                "--size", size]
    runs = {"sens": count(a.sens, a.perf or a.sens, workload, a.time, a.ns)}
    if a.baseline:
        runs["baseline"] = count(a.baseline, a.perf or a.sens, workload, a.time, a.ns)

    per_io = {k: {f: n / r["ios"] for f, n in r["functions"].items()} for k, r in runs.items()}
    print(f"Instructions per I/O in the target's reactor passes (user space), {a.rw} {a.bs} "
          f"{a.queues} x QD{a.qd} on {a.ns}, {a.time:g} s under callgrind\n")
    s = runs["sens"]
    if a.baseline:
        b = runs["baseline"]
        print(f"sens {s['total'] / s['ios']:.0f} ({s['ios']} I/Os), baseline "
              f"{b['total'] / b['ios']:.0f} ({b['ios']} I/Os): "
              f"{s['total'] / s['ios'] / (b['total'] / b['ios']):.3f}x\n")
        print("| function | sens | baseline | change |\n|---|---:|---:|---:|")
        names = set(per_io["sens"]) | set(per_io["baseline"])
        rank = sorted(names, key=lambda f: -max(per_io["sens"].get(f, 0), per_io["baseline"].get(f, 0)))
        for f in rank[:a.top]:
            x, y = per_io["sens"].get(f, 0), per_io["baseline"].get(f, 0)
            print(f"| `{f[:90]}` | {x:.0f} | {y:.0f} | {x - y:+.0f} |")
    else:
        print(f"{s['total'] / s['ios']:.0f} instructions per I/O ({s['ios']} I/Os)\n")
        print("| function | per I/O |\n|---|---:|")
        for f, n in sorted(per_io["sens"].items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"| `{f[:90]}` | {n:.0f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"workload": workload, "ns": a.ns, "time": a.time,
                       "runs": {k: {"ios": r["ios"], "instructions": r["total"],
                                    "per_io": r["total"] / r["ios"],
                                    "functions": r["functions"]} for k, r in runs.items()}},
                      f, indent=1)


if __name__ == "__main__":
    main()
