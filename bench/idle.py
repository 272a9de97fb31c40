#!/usr/bin/env python3
"""CPU of an idle `sens target` and an idle host (issue target: 64 connected queues with no
I/O cost each side under 1 % of a core).

--host perf (default): `sens perf` connects a controller with N I/O queues (keep-alive on, as
by default) and issues 1 I/O per second over all of them (--rate-iops 1); the target's CPU is
read from /proc over the same window, the host's from its own report.
--host raw: N connections each do ICReq and a Fabrics Connect of an admin queue (kato 0, so no
keep-alive traffic), then stay silent; only the target is measured."""
import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time

from common import recv_exact

NQN = "nqn.2026-11.io.sens-target:ram0"
HOSTNQN = "nqn.2014-08.org.nvmexpress:uuid:5ee0c0a5-0000-4000-8000-000000000001"


def connect_admin(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    icreq = struct.pack("<BBBBIHBBI", 0, 0, 128, 0, 128, 0, 0, 0, 0).ljust(128, b"\0")
    s.sendall(icreq)
    recv_exact(s, 128)
    # Connect SQE: opcode 0x7F, fctype 1 at byte 4, SGL in-capsule (type 0x01) of 1024 bytes.
    sqe = bytearray(64)
    sqe[0] = 0x7F
    sqe[1] = 0x40
    struct.pack_into("<H", sqe, 2, 1)
    sqe[4] = 0x01
    struct.pack_into("<QI3xB", sqe, 24, 0, 1024, 0x01)
    struct.pack_into("<HHHBxI", sqe, 40, 0, 0, 31, 0, 0)  # recfmt, qid 0, sqsize 31, cattr, kato 0
    data = bytearray(1024)
    struct.pack_into("<H", data, 16, 0xFFFF)
    data[256:256 + len(NQN)] = NQN.encode()
    data[512:512 + len(HOSTNQN)] = HOSTNQN.encode()
    hdr = struct.pack("<BBBBI", 4, 0, 72, 72, 72 + 1024)
    s.sendall(hdr + bytes(sqe) + bytes(data))
    resp = recv_exact(s, 24)
    status = struct.unpack_from("<H", resp, 8 + 14)[0] >> 1
    if resp[0] != 5 or status != 0:
        raise RuntimeError(f"connect failed: type {resp[0]} status {status:#x}")
    return s


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_target(sens, port):
    return subprocess.Popen(["taskset", "-c", "0", sens, "target", "--listen", f"127.0.0.1:{port}",
                             "--discovery-port", "0", "--ns", "ram:64M", "-q"],
                            stdout=subprocess.DEVNULL)


def wait_listening(port):
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"target not listening on port {port}")


def raw_connections(args, target, port):
    conns = [connect_admin(port) for _ in range(args.connections)]
    time.sleep(0.5)
    c0, t0 = cpu_seconds(target.pid), time.time()
    time.sleep(args.seconds)
    c1, t1 = cpu_seconds(target.pid), time.time()
    pct = 100.0 * (c1 - c0) / (t1 - t0)
    print(f"idle: {len(conns)} connected queues, target CPU {pct:.2f} % of a core over "
          f"{t1 - t0:.1f} s ({c1 - c0:.3f} s)")
    for s in conns:
        s.close()
    return pct < 1.0


def perf_host(args, target, port):
    warmup = 1.0
    report = os.path.join("/tmp", f"sens-idle-{os.getpid()}.json")
    perf = subprocess.Popen(["taskset", "-c", "1", args.sens, "perf", "-r",
                             f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{NQN}",
                             "--queues", str(args.connections), "--qd", "1", "--rate-iops", "1",
                             "--time", str(args.seconds), "--warmup", str(warmup), "-q",
                             "--json", report], stdout=subprocess.DEVNULL)
    try:
        # The target's window: the perf run's measured seconds, after connect and warm-up.
        time.sleep(warmup + 0.5)
        c0, t0 = cpu_seconds(target.pid), time.time()
        time.sleep(args.seconds - 1.0)
        c1, t1 = cpu_seconds(target.pid), time.time()
        if perf.wait(timeout=args.seconds + 60) != 0:
            raise RuntimeError("sens perf failed")
        with open(report) as f:
            j = json.load(f)
    finally:
        if perf.poll() is None:
            perf.kill()
        if os.path.exists(report):
            os.unlink(report)
    target_pct = 100.0 * (c1 - c0) / (t1 - t0)
    host_pct = 100.0 * (j["cpu_user_s"] + j["cpu_sys_s"]) / j["runtime_s"]
    print(f"idle: {args.connections} I/O queues at 1 I/O per second, target CPU {target_pct:.2f} % "
          f"of a core, sens perf {host_pct:.2f} % (over {j['runtime_s']:.1f} s; host sleeps "
          f"{j['poll']['sleeps']}, wakeups {j['poll']['wakeups']})")
    return target_pct < 1.0 and host_pct < 1.0


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sens", default="build/sens")
    ap.add_argument("--host", choices=["perf", "raw"], default="perf")
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    port = args.port
    if not port:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    target = start_target(args.sens, port)
    try:
        wait_listening(port)
        ok = raw_connections(args, target, port) if args.host == "raw" else \
            perf_host(args, target, port)
        return 0 if ok else 1
    finally:
        target.send_signal(signal.SIGINT)
        target.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
