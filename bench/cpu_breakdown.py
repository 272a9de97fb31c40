#!/usr/bin/env python3
"""Where each I/O's CPU goes (issue 31): CPU nanoseconds per I/O on each side, split into the
kernel's TCP/IP, payload copies (kernel and user), CRC32C, TLS crypto, the hypervisor (a
paravirtualized guest's interrupt enabling), the rest of the kernel (system calls with libc's
wrappers, epoll, scheduler), sens's own code and other libraries,
for plain TCP, header + data digests, and TLS 1.3 (TLS_AES_128_GCM_SHA256).

`sens target` (RAM namespace) runs pinned to core 0 and `sens perf` to core 1. For each mode,
while perf runs (after its warm-up), `perf record -e cpu-clock -F FREQ -C 0,1` samples both
cores; each sample of the target's or perf's process is put in a bucket by its symbol and
library. A bucket's nanoseconds per I/O are its samples / FREQ / the I/Os done in the window.
Samples of other processes (and idle) are reported apart, so a busy machine shows itself.
Loopback TCP processes a packet's receive side in the sender's context, so "kernel TCP/IP" on
one side includes the other side's receive work: read the two sides' sum for the whole cost.
Needs `perf` (Debian's linux-perf) and root. Modes are run in turns, --reps times, and the
median of each bucket is reported; a Markdown table; --json writes every run.

    sudo bench/cpu_breakdown.py [--sens build/sens] [--time 4] [--reps 3] [--rw randread --bs 4k --qd 32]
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from common import free_port, nvme_tls_key

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NQN = "nqn.2026-11.io.sens-target:ram0"
BUCKETS = ["kernel TCP/IP", "payload copy", "CRC32C", "TLS crypto", "hypervisor", "kernel other",
           "sens", "libraries"]
# libc's system call wrappers: a sample there is the system call's entry or return (on a
# paravirtualized guest the timer interrupt often lands on the return to user space).
SYSCALL = re.compile(r"^(__libc_|__GI___)?(epoll_\w+|sendmsg|recvmsg|send|recv|readv|writev|"
                     r"read|write|io_uring_\w+|syscall|__send|__recv|poll|ppoll)$")
PARAVIRT = re.compile(r"^(pvm_|pv_|xen_|kvm_|__pv_|native_irq|hv_)")
COPY = re.compile(r"(^_copy_(from|to)_iter|^copy_(user|page|iovec|to_user|from_user)|"
                  r"^rep_movs|^__?memcpy|^__memmove|^memmove|^memcpy|^copy_mc|^__copy_)")
CRC = re.compile(r"crc32|crc_", re.I)
CRYPTO = re.compile(r"(aes|gcm|ghash|gf128|sha|evp|ossl|ssl|tls|cipher|poly|chacha)", re.I)
NET = re.compile(r"(tcp|^ip_|^__ip|ipv4|ipv6|inet|skb|sock|^sk_|^__sk|net_|netif|napi|^dev_|"
                 r"^__dev|loopback|dst|neigh|^nf_|sendmsg|recvmsg|sendto|recvfrom|^__sys_send|"
                 r"^__sys_recv|^do_softirq|^__do_softirq|^net|^lock_sock|^release_sock)")


def bucket(sym, dso, sens_path):
    kernel = dso.startswith("[kernel") or dso.endswith(".ko") or dso == "[unknown]" and \
        sym.startswith("0xffff")
    if COPY.search(sym):
        return "payload copy"
    if CRC.search(sym) or "libisal" in dso:
        return "CRC32C"
    if "libcrypto" in dso or "libssl" in dso or "libIPSec_MB" in dso or (kernel and CRYPTO.search(sym) and "tcp" not in sym):
        return "TLS crypto"
    if kernel and PARAVIRT.search(sym):
        return "hypervisor"  # a paravirtualized guest's interrupt enabling and hypercalls
    if kernel:
        return "kernel TCP/IP" if NET.search(sym) else "kernel other"
    if "libc.so" in dso and SYSCALL.search(sym):
        return "kernel other"
    if os.path.realpath(dso) == sens_path or os.path.basename(dso).startswith("libsens"):
        return "sens"
    return "libraries"


def wait_port(port, seconds=10):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    sys.exit(f"the target did not listen on {port}")


def one_run(a, mode, port, psk_file, target_pid, work):
    trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN}"
    warmup = 0.7
    report = os.path.join(work, "perf.json")
    cmd = ["taskset", "-c", "1", a.sens, "perf", "-r", trid, "--time", str(a.time), "--warmup",
           str(warmup), "-q", "--size", "256M", "--json", report, "--rw", a.rw, "--bs", a.bs,
           "--qd", str(a.qd)]
    if mode == "digests":
        cmd += ["--hdr-digest", "--data-digest"]
    if mode == "TLS AES-128":
        cmd += ["--tls", psk_file]
    host = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(warmup + 0.3)  # connected and past the warm-up
    window = max(a.time - 1.0, 1.0)
    data = os.path.join(work, "samples.data")
    subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(a.freq), "-C", "0,1",
                    "-o", data, "--", "sleep", str(window)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, err = host.communicate(timeout=120)
    if host.returncode != 0:
        sys.exit(f"{mode}: sens perf failed: {err}")
    j = json.load(open(report))
    iops = j["iops"]
    ios = iops * window
    script = subprocess.run(["perf", "script", "-i", data, "-F", "pid,cpu,ip,sym,dso"],
                            capture_output=True, text=True, check=True).stdout
    sides = {"target": {b: 0 for b in BUCKETS}, "host": {b: 0 for b in BUCKETS}}
    others = 0
    idle = 0
    line_re = re.compile(r"^\s*(\d+)\s+\[(\d+)\]\s+[0-9a-f]+\s+(.*?)\s*\((.*)\)\s*$")
    for line in script.splitlines():
        m = line_re.match(line)
        if not m:
            continue
        pid, sym, dso = int(m.group(1)), m.group(3) or "[unknown]", m.group(4)
        if pid == target_pid:
            side = "target"
        elif pid == host.pid or (pid != 0 and is_child(pid, host.pid)):
            side = "host"
        elif pid == 0:
            idle += 1
            continue
        else:
            others += 1
            continue
        b = bucket(sym, dso, a.sens_real)
        sides[side][b] += 1
        key = (b, sym, os.path.basename(dso))
        TOP[key] = TOP.get(key, 0) + 1
    ns = lambda samples: samples / a.freq * 1e9 / ios if ios else 0.0
    out = {"mode": mode, "iops": iops}
    for side, counts in sides.items():
        out[side] = {b: ns(c) for b, c in counts.items()}
        out[side]["total"] = ns(sum(counts.values()))
    out["idle_share"] = idle / (2 * window * a.freq)
    out["other_processes_share"] = others / (2 * window * a.freq)
    return out


_children = {}
TOP = {}  # (bucket, symbol, library) -> samples over every run (--top)


def is_child(pid, parent):
    # taskset execs sens perf, so perf's pid is taskset's; threads share the pid in samples.
    if pid not in _children:
        try:
            with open(f"/proc/{pid}/stat") as f:
                _children[pid] = int(f.read().rsplit(")", 1)[1].split()[1]) == parent
        except OSError:
            _children[pid] = False
    return _children[pid]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sens", default=os.path.join(ROOT, "build", "sens"))
    ap.add_argument("--time", type=float, default=4, help="seconds of each perf run")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--freq", type=int, default=4999, help="samples per second per core")
    ap.add_argument("--rw", default="randread")
    ap.add_argument("--bs", default="4k")
    ap.add_argument("--qd", type=int, default=32)
    ap.add_argument("--modes", default="plain,digests,TLS AES-128")
    ap.add_argument("--top", type=int, default=0,
                    help="also list the N hottest symbols of the two processes, with their bucket")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    a.sens_real = os.path.realpath(a.sens)
    if a.time < 2:
        sys.exit("--time must be at least 2 s (the window is --time - 1 s)")
    modes = [m.strip() for m in a.modes.split(",")]
    for m in modes:
        if m not in ("plain", "digests", "TLS AES-128"):
            sys.exit(f"unknown mode '{m}' (plain, digests, TLS AES-128)")
    if subprocess.run(["perf", "--version"], capture_output=True).returncode != 0:
        sys.exit("perf is not installed (Debian: apt-get install linux-perf)")
    work = tempfile.mkdtemp(prefix="sens-cpu-breakdown-")
    key = nvme_tls_key(1)
    psk_file = os.path.join(work, "psk")
    open(psk_file, "w").write(key + "\n")
    plain, tls = free_port(), free_port()
    target = subprocess.Popen(
        ["taskset", "-c", "0", a.sens, "target", "--listen", f"127.0.0.1:{plain}", "--tls-listen",
         f"127.0.0.1:{tls}", "--tls", psk_file, "--discovery-port", "0", "--ns", "ram:1G", "-q"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    runs = []
    try:
        wait_port(tls)
        for rep in range(a.reps):
            for mode in modes:
                port = tls if mode.startswith("TLS") else plain
                r = one_run(a, mode, port, psk_file, target.pid, work)
                r["rep"] = rep
                runs.append(r)
                print(f"rep {rep + 1}/{a.reps} {mode}: {r['iops'] / 1e3:.1f}k IOPS, "
                      f"target {r['target']['total']:.0f} ns/IO, host {r['host']['total']:.0f} "
                      f"ns/IO, other processes {100 * r['other_processes_share']:.1f}% of the "
                      f"two cores", file=sys.stderr)
    finally:
        target.terminate()
        target.wait(timeout=10)
    print(f"{a.rw} {a.bs} QD{a.qd}, target core 0, host core 1; CPU ns per I/O, median of "
          f"{a.reps} (perf record -e cpu-clock -F {a.freq})\n")
    print("| mode | side | kIOPS | " + " | ".join(BUCKETS) + " | total |")
    print("|---|---|---:|" + "---:|" * (len(BUCKETS) + 1))
    for mode in modes:
        mr = [r for r in runs if r["mode"] == mode]
        kiops = statistics.median(r["iops"] for r in mr) / 1e3
        for side in ("target", "host"):
            cells = [f"{statistics.median(r[side][b] for r in mr):.0f}" for b in BUCKETS + ["total"]]
            print(f"| {mode} | {side} | {kiops:.1f} | " + " | ".join(cells) + " |")
    if a.top:
        total = sum(TOP.values()) or 1
        print(f"\n| samples % | bucket | symbol | library |\n|---:|---|---|---|")
        for (b, sym, lib), n in sorted(TOP.items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"| {100 * n / total:.1f} | {b} | `{sym}` | {lib} |")
    busy = max(r["other_processes_share"] for r in runs)
    print(f"\nother processes: at most {100 * busy:.1f}% of the two cores' samples in any run")
    if a.json:
        json.dump({"args": {k: v for k, v in vars(a).items()}, "runs": runs}, open(a.json, "w"),
                  indent=2)


if __name__ == "__main__":
    main()
