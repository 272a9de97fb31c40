#!/usr/bin/env python3
"""Buffer-pool isolation (issue 29): a quiet host and a stalled host on one `sens target` (one
reactor, so one buffer pool; a RAM namespace). The quiet host runs `sens perf` (64 KiB random
reads and writes at QD 8 by default); the stalled host is a raw NVMe/TCP host written here: it
connects --stalled-queues I/O queues with a tiny receive window, sends as many 128 KiB reads
as each queue holds, and never reads a byte back, so every read's buffer stays in the pool.
Runs the quiet host alone, then with the stalled host in place (which then disconnects),
--reps times in turns. Reports the quiet host's IOPS (and p99) each time, the ratios and their
median as a Markdown table; --json writes the runs.
Without fair shares the stalled host pins the whole pool and the quiet host's second run
stalls. Not a timed test: numbers depend on the machine (the stall deadline is set long
enough, --stall-timeout, not to end the stalled host during the run)."""
import argparse
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

from common import NQN, Target, add_common_arguments, perf_command, perf_summary, recv_exact

STALLED = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000002a"
QUIET = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-00000000002b"
SGL_OFFSET, SGL_TRANSPORT = 0x01, 0x5A


# ---------------------------------------------------------------- a raw host (no reads back)

def sqe(opcode, cid, nsid=0, sgl_type=SGL_TRANSPORT, sgl_len=0, cdw=()):
    """A 64-byte SQE: SGL command (PSDT 01b), `cdw`: dwords 10.. as (index, value)."""
    b = bytearray(64)
    struct.pack_into("<BBHI", b, 0, opcode, 0x40, cid, nsid)
    struct.pack_into("<QI", b, 24, 0, sgl_len)
    b[39] = sgl_type
    for i, v in cdw:
        struct.pack_into("<I", b, 40 + 4 * (i - 10), v)
    return b


def capsule(sqe_bytes, data=b""):
    plen = 72 + len(data)
    return struct.pack("<BBBBI", 0x04, 0, 72, 72 if data else 0, plen) + sqe_bytes + data


def expect_response(s, what):
    ch = recv_exact(s, 8)
    rest = recv_exact(s, struct.unpack_from("<I", ch, 4)[0] - 8)
    if ch[0] != 0x05:
        raise RuntimeError(f"{what}: PDU type {ch[0]:#x}, expected a response")
    status = struct.unpack_from("<H", rest, 14)[0] >> 1
    if status:
        raise RuntimeError(f"{what}: status {status:#x}")
    return struct.unpack_from("<I", rest, 0)[0]  # dw0


def connect_queue(port, qid, cntlid, sqsize, rcvbuf):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.connect(("127.0.0.1", port))
    s.sendall(struct.pack("<BBBBIHBBI", 0x00, 0, 128, 0, 128, 0, 0, 0, 0) + bytes(112))
    recv_exact(s, 128)  # ICResp
    data = bytearray(1024)
    data[0:16] = bytes.fromhex("5e115e1100004000800000000000002a")
    struct.pack_into("<H", data, 16, cntlid)
    data[256:256 + len(NQN)] = NQN.encode()
    data[512:512 + len(STALLED)] = STALLED.encode()
    c = sqe(0x7F, 1, nsid=0x01, sgl_type=SGL_OFFSET, sgl_len=1024)
    struct.pack_into("<HHHBxI", c, 40, 0, qid, sqsize, 0, 0)  # recfmt qid sqsize cattr kato=0
    s.sendall(capsule(c, bytes(data)))
    return s, expect_response(s, f"Connect qid {qid}") & 0xFFFF


def stall(port, queues, depth):
    """Connects the stalled host and leaves `depth` unread 128 KiB reads on each I/O queue."""
    admin, cntlid = connect_queue(port, 0, 0xFFFF, 31, 0)
    p = sqe(0x7F, 2, nsid=0x00)  # Property Set CC: EN, 64-byte SQEs, 16-byte CQEs
    struct.pack_into("<BxxxIQ", p, 40, 0, 0x14, 0x00460001)
    admin.sendall(capsule(p))
    expect_response(admin, "Property Set CC")
    f = sqe(0x09, 3, cdw=((10, 0x07), (11, (queues - 1) | ((queues - 1) << 16))))
    admin.sendall(capsule(f))
    expect_response(admin, "Set Features queues")
    socks = [admin]
    for qid in range(1, queues + 1):
        q, _ = connect_queue(port, qid, cntlid, depth - 1, 4096)
        socks.append(q)
        lba = qid * depth * 256
        for i in range(depth):
            r = sqe(0x02, 10 + i, nsid=1, sgl_len=128 * 1024,
                    cdw=((10, (lba + i * 256) & 0xFFFFFFFF), (11, 0), (12, 255)))
            q.sendall(capsule(r))
    return socks


# ---------------------------------------------------------------- the quiet host

def quiet_run(a, port):
    cmd = perf_command(a, port, QUIET,
                       ["--size", "256M", "--rw", "randrw", "--bs", a.bs, "--qd", str(a.qd)])
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.time + 30)
    except subprocess.TimeoutExpired:
        return {"iops": 0.0, "p99_us": None, "errors": None, "note": "sens perf hung"}
    if p.returncode != 0 or "{" not in p.stdout:
        return {"iops": 0.0, "p99_us": None, "errors": None, "note": p.stderr.strip()[-200:]}
    return perf_summary(p.stdout)


def pool_stats(target, path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
    target.send_signal(signal.SIGUSR1)
    for _ in range(300):
        if os.path.exists(path):
            try:
                with open(path) as f:
                    return json.load(f)["reactors"][0]
            except ValueError:
                pass
        time.sleep(0.01)
    return {}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    add_common_arguments(ap, time=3)
    ap.add_argument("--bs", default="64k")
    ap.add_argument("--qd", type=int, default=8)
    ap.add_argument("--stalled-queues", type=int, default=2)
    ap.add_argument("--depth", type=int, default=1024, help="unread reads per stalled queue")
    ap.add_argument("--buffer-pool", default="64M")
    ap.add_argument("--stall-timeout", default="600s",
                    help="the target's --stall-timeout ('' leaves it out: builds before it)")
    ap.add_argument("--extra", default="", help="more `sens target` options")
    ap.add_argument("--reps", type=int, default=3, help="alone / with pairs, in turns")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="sens-isolation-bench-")
    stats = os.path.join(work, "stats.json")
    args = ["--ns", "ram:1G", "--cores", "1", "--buffer-pool", a.buffer_pool, "--stats-json",
            stats] + (["--stall-timeout", a.stall_timeout] if a.stall_timeout else [])
    runs = []
    with Target(a.sens, args + a.extra.split(), work=work) as target:
        port = target.port
        quiet_run(a, port)  # warm-up: the namespace's pages and the pool grow here
        # Alone and with the stalled host in turns, so that a busy machine's drift hits both.
        for _ in range(a.reps):
            alone = quiet_run(a, port)
            socks = stall(port, a.stalled_queues, a.depth)
            time.sleep(1)  # the stalled reads take their buffers
            pinned = pool_stats(target.proc, stats).get("buffer_pool", {})
            together = quiet_run(a, port)
            for s in socks:
                s.close()  # the target frees its buffers as the sends fail
            time.sleep(0.5)
            runs.append({"alone": alone, "with_stalled": together, "pinned": pinned,
                         "ratio": together["iops"] / alone["iops"] if alone["iops"] else 0.0})
    pinned = runs[-1]["pinned"]
    print(f"quiet host: `sens perf --rw randrw --bs {a.bs} --qd {a.qd}`, {a.time} s; stalled "
          f"host: {a.stalled_queues} queues x {a.depth} unread 128 KiB reads; pool "
          f"{a.buffer_pool}, {pinned.get('in_use_bytes', 0) >> 20} MiB in use before the "
          f"second run, share cap {pinned.get('share_bytes', 0) >> 20} MiB; {a.reps} reps\n")
    print("| rep | alone IOPS | with the stalled host IOPS | ratio | p99 us alone / with | errors |")
    print("|---|---:|---:|---:|---|---|")
    for i, r in enumerate(runs):
        al, wi = r["alone"], r["with_stalled"]
        p99 = lambda x: f"{x['p99_us']:.0f}" if x["p99_us"] is not None else "-"
        print(f"| {i + 1} | {al['iops']:.0f} | {wi['iops']:.0f} | {r['ratio']:.2f} | "
              f"{p99(al)} / {p99(wi)} | {al['errors']} / {wi['errors']} |")
    ratios = sorted(r["ratio"] for r in runs)
    print(f"\nmedian ratio with / alone: {ratios[len(ratios) // 2]:.2f}")
    for r in runs:
        for x in (r["alone"], r["with_stalled"]):
            if x.get("note"):
                print(f"note: {x['note']}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(runs, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
