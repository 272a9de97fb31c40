#!/usr/bin/env python3
"""Authentication storm: a verified `sens perf` (4 KiB randrw, QD 4, DH-HMAC-CHAP with the null
group) against one `sens target`, first quiet, then while --hosts hosts negotiate ffdhe8192 at
once. Each storm host is a raw NVMe/TCP admin queue (ICReq, Connect, AUTH_Send/AUTH_Receive)
that runs the whole exchange and checks SUCCESS1; a host refused for lack of a negotiation slot
tries again after 1 to 2 s, as a host's reconnect would. The storm hosts use a short DH
exponent (their side stays cheap; the target's side is the full ffdhe8192 work: key
generation, the check of the host's value, the shared secret). As in the other benches the
target runs on core 0 (its reactor pinned there, its DH workers on the cores it was given: the
same core) and `sens perf` on core 1; the storm hosts are not pinned. Reports the verified run's
p99 quiet and under the storm, its errors, and how the storm went (authenticated, refusals,
the target's negotiation counters) as a Markdown table; --json writes the runs. Numbers depend
on the machine: say how busy it was."""
import argparse
import base64
import ctypes
import ctypes.util
import hashlib
import hmac
import json
import os
import random
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
import zlib

from common import NQN, Target, add_common_arguments, perf_command, perf_summary, recv_exact

PERF_HOST = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000a1"
STORM_HOST = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000a2"
FFDHE8192 = 5


def _libcrypto_modexp():
    """pow(b, e, m) by OpenSSL's BN_mod_exp (Montgomery; about 10x faster than Python's for
    8192-bit numbers), or None without libcrypto. The storm hosts stand for other machines:
    the less CPU their side takes here, the more the bench measures the target alone."""
    name = ctypes.util.find_library("crypto")
    if not name:
        return None
    lib = ctypes.CDLL(name)
    vp, cp, ci = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for fn, res, args in (("BN_bin2bn", vp, [cp, ci, vp]), ("BN_bn2binpad", ci, [vp, cp, ci]),
                          ("BN_mod_exp", ci, [vp, vp, vp, vp, vp]), ("BN_new", vp, []),
                          ("BN_free", None, [vp]), ("BN_CTX_new", vp, []),
                          ("BN_CTX_free", None, [vp])):
        getattr(lib, fn).restype, getattr(lib, fn).argtypes = res, args

    def modexp(b, e, m):
        size = (m.bit_length() + 7) // 8
        nums = [lib.BN_bin2bn(v.to_bytes(size, "big"), size, None) for v in (b, e, m)]
        r, ctx = lib.BN_new(), lib.BN_CTX_new()
        try:
            if not all(nums) or not r or not ctx or lib.BN_mod_exp(r, *nums, ctx) != 1:
                raise RuntimeError("BN_mod_exp failed")
            out = ctypes.create_string_buffer(size)
            if lib.BN_bn2binpad(r, out, size) != size:
                raise RuntimeError("BN_bn2binpad failed")
            return int.from_bytes(out.raw, "big")
        finally:
            for n in nums + [r]:
                lib.BN_free(n)
            lib.BN_CTX_free(ctx)

    return modexp


MODEXP = _libcrypto_modexp() or pow


def make_secret(seed):
    """A DHHC-1 secret with transform 00 (the key is used as is): key || CRC-32 (LE)."""
    key = bytes((seed * 31 + i * 7) & 0xFF for i in range(32))
    text = base64.b64encode(key + struct.pack("<I", zlib.crc32(key))).decode()
    return key, f"DHHC-1:00:{text}:"


def ffdhe_prime(group_name):
    """p of an RFC 7919 group, from OpenSSL's own parameters (PKCS#3 DER: SEQUENCE {p, g})."""
    pem = subprocess.run(["openssl", "genpkey", "-genparam", "-algorithm", "DH", "-pkeyopt",
                          f"group:{group_name}"], capture_output=True, text=True,
                         check=True).stdout
    der = base64.b64decode("".join(l for l in pem.splitlines() if not l.startswith("-----")))

    def length(i):
        n = der[i]
        if n < 0x80:
            return n, i + 1
        k = n & 0x7F
        return int.from_bytes(der[i + 1:i + 1 + k], "big"), i + 1 + k

    assert der[0] == 0x30
    _, i = length(1)
    assert der[i] == 0x02
    n, i = length(i + 1)
    return int.from_bytes(der[i:i + n], "big")


class RawHost:
    """One admin queue: ICReq, Connect, then AUTH_Send (in-capsule) / AUTH_Receive."""

    def __init__(self, port, hostnqn):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.cid = 1
        icreq = struct.pack("<BBBBIHBBI", 0, 0, 128, 0, 128, 0, 0, 0, 0).ljust(128, b"\0")
        self.s.sendall(icreq)
        recv_exact(self.s, 128)
        data = bytearray(1024)
        struct.pack_into("<H", data, 16, 0xFFFF)
        data[256:256 + len(NQN)] = NQN.encode()
        data[512:512 + len(hostnqn)] = hostnqn.encode()
        sqe = self.sqe(0x01, len(data))
        struct.pack_into("<HHHBxI", sqe, 40, 0, 0, 31, 0, 0)  # recfmt, qid 0, sqsize 31, kato 0
        status, dw0 = self.command(sqe, bytes(data))
        if status != 0:
            raise RuntimeError(f"Connect: status {status:#x}")
        if not dw0 & (1 << 17):  # AUTHREQ.ATR
            raise RuntimeError("the target does not ask to authenticate")

    def sqe(self, fctype, in_capsule_len):
        sqe = bytearray(64)
        sqe[0] = 0x7F
        sqe[1] = 0x40  # SGL
        struct.pack_into("<H", sqe, 2, self.cid)
        self.cid += 1
        sqe[4] = fctype
        if in_capsule_len:  # SGL data block, offset 0, in the capsule
            struct.pack_into("<QI3xB", sqe, 24, 0, in_capsule_len, 0x01)
        else:  # transport data block
            struct.pack_into("<QI3xB", sqe, 24, 0, 0, 0x5A)
        return sqe

    def command(self, sqe, data=b"", read_len=0):
        hdr = struct.pack("<BBBBI", 4, 0, 72, 72 if data else 0, 72 + len(data))
        self.s.sendall(hdr + bytes(sqe) + data)
        out = b""
        while True:
            ch = recv_exact(self.s, 8)
            ptype, _, hlen, pdo, plen = struct.unpack("<BBBBI", ch)
            rest = recv_exact(self.s, plen - 8)
            if ptype == 7:  # C2HData
                out += rest[pdo - 8:]
                continue
            if ptype != 5:
                raise RuntimeError(f"unexpected PDU type {ptype}")
            dw0 = struct.unpack_from("<I", rest, 0)[0]
            status = struct.unpack_from("<H", rest, 14)[0] >> 1
            return status, (out if read_len else dw0)

    def auth_send(self, msg):
        sqe = self.sqe(0x05, len(msg))
        struct.pack_into("<I", sqe, 40, (0xE9 << 24) | (0x01 << 16) | (0x01 << 8))
        struct.pack_into("<I", sqe, 44, len(msg))
        status, _ = self.command(sqe, msg)
        if status != 0:
            raise RuntimeError(f"AUTH_Send: status {status:#x}")

    def auth_receive(self, al=4096):
        sqe = self.sqe(0x06, 0)
        struct.pack_into("<I", sqe, 24 + 8, al)  # SGL length
        struct.pack_into("<I", sqe, 40, (0xE9 << 24) | (0x01 << 16) | (0x01 << 8))
        struct.pack_into("<I", sqe, 44, al)
        status, data = self.command(sqe, b"", al)
        if status != 0:
            raise RuntimeError(f"AUTH_Receive: status {status:#x}")
        return data

    def close(self):
        self.s.close()


def authenticate(host, key, hostnqn, p, t_id):
    """The ffdhe8192 exchange with SHA-256. Returns None, or the FAILURE1 reason code."""
    neg = bytearray(8 + 64)
    neg[0], neg[1] = 0x00, 0x00  # common, NEGOTIATE
    struct.pack_into("<H", neg, 4, t_id)
    neg[7] = 1  # one protocol descriptor
    neg[8], neg[10], neg[11] = 1, 1, 1  # DH-HMAC-CHAP, one hash, one group
    neg[12], neg[12 + 30] = 1, FFDHE8192
    host.auth_send(bytes(neg))
    ch = host.auth_receive()
    if ch[0] == 0x00 and ch[1] == 0xF1:  # FAILURE1
        return ch[7]
    if ch[1] != 0x01:  # CHALLENGE
        raise RuntimeError(f"no CHALLENGE: {ch[0]:#x}/{ch[1]:#x}")
    hl, dhvlen, s1 = ch[6], struct.unpack_from("<H", ch, 10)[0], struct.unpack_from("<I", ch, 12)[0]
    c1 = ch[16:16 + hl]
    ctrl_pub = int.from_bytes(ch[16 + hl:16 + hl + dhvlen], "big")
    y = random.getrandbits(64) | (1 << 63)  # short: the host's side stays cheap
    host_pub = MODEXP(2, y, p).to_bytes(dhvlen, "big")
    shared = MODEXP(ctrl_pub, y, p).to_bytes(dhvlen, "big")
    c1a = hmac.new(hashlib.sha256(shared).digest(), c1, hashlib.sha256).digest()
    r1 = hmac.new(key, c1a + struct.pack("<IHB", s1, t_id, 0) + b"HostHost" + hostnqn.encode() +
                  b"\0" + NQN.encode(), hashlib.sha256).digest()
    rep = struct.pack("<BBHHBBBBHI", 0x01, 0x02, 0, t_id, hl, 0, 0, 0, dhvlen, 0)
    host.auth_send(rep + r1 + bytes(hl) + host_pub)
    s = host.auth_receive()
    if s[0] == 0x00 and s[1] == 0xF1:
        return s[7]
    if s[1] != 0x03:  # SUCCESS1
        raise RuntimeError(f"no SUCCESS1: {s[0]:#x}/{s[1]:#x}")
    return None


def storm(a, port, key, p, deadline, result):
    lock = threading.Lock()

    def one(i):
        tries = 0
        while time.monotonic() < deadline:
            tries += 1
            try:
                h = RawHost(port, STORM_HOST)
                try:
                    reason = authenticate(h, key, STORM_HOST, p, i)
                finally:
                    h.close()
            except Exception as e:  # noqa: BLE001 (counted and reported)
                with lock:
                    result["errors"].append(f"host {i}: {e}")
                return
            if reason is None:
                with lock:
                    result["authenticated"] += 1
                    result["tries"] += tries
                return
            with lock:
                result["refusals"] += 1
            time.sleep(1.0 + random.random())  # a host's reconnect pause (Linux: 10 s)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(a.hosts)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result["seconds"] = time.monotonic() - start


def storm_in_child(a, port, key, p, deadline):
    """storm() in a child process at nice --storm-nice (a niced process cannot take its nice
    value back, and the next runs' `sens perf` must not inherit it); returns its result."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        try:
            os.nice(a.storm_nice)
            result = {"authenticated": 0, "refusals": 0, "tries": 0, "errors": []}
            storm(a, port, key, p, deadline, result)
            os.write(w, json.dumps(result).encode())
        except BaseException as e:  # noqa: BLE001 (reported by the parent)
            os.write(w, json.dumps({"crashed": repr(e)}).encode())
            code = 1
        os._exit(code)
    os.close(w)
    data = b""
    while chunk := os.read(r, 1 << 16):
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    result = json.loads(data)
    if "crashed" in result:
        sys.exit(f"the storm failed: {result['crashed']}")
    return result


def perf(a, port, secret):
    cmd = perf_command(a, port, PERF_HOST, ["--dhchap-secret", secret, "--rw", "randrw", "--bs",
                                            "4k", "--qd", "4", "--size", "64M", "--verify"])
    return subprocess.Popen(["taskset", "-c", "1"] + cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def summary(proc):
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 0:
        sys.exit(f"sens perf failed: {err}")
    return perf_summary(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    add_common_arguments(ap, time=10, time_help="seconds of each verified run")
    ap.add_argument("--hosts", type=int, default=200)
    ap.add_argument("--negotiations", type=int, default=0,
                    help="the target's --dhchap-negotiations (0: its default)")
    ap.add_argument("--dhchap-nice", type=int, default=None,
                    help="the target's --dhchap-nice (how much lower its DH workers run than its "
                         "reactors; default: the target's own default)")
    ap.add_argument("--full-check", action="store_true",
                    help="the target's --dhchap-full-check (y^q = 1 for every host's DH value)")
    ap.add_argument("--reps", type=int, default=1,
                    help="quiet / storm pairs, in turns (medians reported)")
    ap.add_argument("--storm-nice", type=int, default=19,
                    help="nice value of the storm hosts (this script's process once the verified "
                         "run has started): they stand for other machines, so by default they take "
                         "only the CPU the target and the verified run leave (0: compete as equals)")
    a = ap.parse_args()
    key, secret = make_secret(7)
    p = ffdhe_prime("ffdhe8192")
    args = ["--ns", "ram:256M", "--host-key", f"{PERF_HOST}={secret}", "--host-key",
            f"{STORM_HOST}={secret}", "--max-connections", "1024"]
    args += ["--dhchap-negotiations", str(a.negotiations)] if a.negotiations else []
    args += ["--dhchap-nice", str(a.dhchap_nice)] if a.dhchap_nice is not None else []
    args += ["--dhchap-full-check"] if a.full_check else []
    pairs = []
    with Target(a.sens, args, rpc=True, prefix="sens-auth-storm-", core=0) as target:
        port = target.port
        for rep in range(a.reps):
            quiet = summary(perf(a, port, secret))
            run = perf(a, port, secret)
            time.sleep(1.0)  # the storm starts once the run is under way
            result = storm_in_child(a, port, key, p, time.monotonic() + a.time - 1.5)
            stormy = summary(run)
            ratio = stormy["p99_us"] / quiet["p99_us"] if quiet["p99_us"] else float("nan")
            pairs.append({"quiet": quiet, "storm": stormy, "ratio": ratio, "hosts": result})
        stats = json.loads(target.rpc("stats_get"))
    n = stats["auth"].get("negotiations", {"limit": "none (DH on the reactor)"})
    print(f"verified sens perf: 4 KiB randrw QD 4, {a.time} s; storm: {a.hosts} hosts "
          f"negotiating ffdhe8192 (SHA-256) at once (nice {a.storm_nice}), target limit "
          f"{n['limit']} at a time, DH workers at "
          f"{'the default nice' if a.dhchap_nice is None else f'nice +{a.dhchap_nice}'}, "
          f"{'full' if a.full_check else 'range'} check of the hosts' values; "
          f"{a.reps} pair(s)\n")
    print("| pair | quiet IOPS | quiet p99 (us) | storm IOPS | storm p99 (us) | p99 ratio | errors "
          "(quiet / storm) | storm hosts authenticated |")
    print("|---|---:|---:|---:|---:|---:|---|---|")
    for i, r in enumerate(pairs):
        q, st, h = r["quiet"], r["storm"], r["hosts"]
        print(f"| {i + 1} | {q['iops']:.0f} | {q['p99_us']:.1f} | {st['iops']:.0f} | "
              f"{st['p99_us']:.1f} | {r['ratio']:.2f}x | {q['errors']} / {st['errors']} | "
              f"{h['authenticated']}/{a.hosts} in {h.get('seconds', 0):.1f} s "
              f"({h['refusals']} refusals, {len(h['errors'])} errors) |")
        for e in h["errors"][:5]:
            print(f"  {e}")
    ratio = statistics.median(r["ratio"] for r in pairs)
    print(f"\nmedian p99 ratio storm/quiet: {ratio:.2f}x")
    print(f"target negotiations: {json.dumps(n)}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"pairs": pairs, "ratio": ratio, "negotiations": n, "args": vars(a)}, f,
                      indent=2)


if __name__ == "__main__":
    main()
