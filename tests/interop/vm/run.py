#!/usr/bin/env python3
"""Boot the interop VM (built by build.sh) in QEMU, run SCRIPT in it as root, and exit with
SCRIPT's exit status (124: the VM timed out; 125: the guest ended without one).

The guest (10.0.2.15, QEMU user networking) reaches the host only through the forwards:
  --guestfwd G:H  the guest's connections to 10.0.2.100:G go to 127.0.0.1:H on the host
                  (a socat relay per connection, so every queue of an NVMe controller works)
  --hostfwd H:G   connections to 127.0.0.1:H on the host go to guest port G. QEMU accepts
                  them before anything listens in the guest: wait for the guest to say so.
The console goes to --log, each line stamped with the seconds since QEMU started, and to
stdout unless -q. KVM is used only where it is hardware KVM (not kvm_pvm); else TCG.
The image is read from $SENS_VM_CACHE/image (default ~/.cache/sens-vm/image).
"""
import argparse
import ctypes
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

CACHE = os.environ.get("SENS_VM_CACHE") or os.path.expanduser("~/.cache/sens-vm")
HERE = os.path.dirname(os.path.abspath(__file__))


class Stop(Exception):
    """A signal that ends the run (the VM goes with it)."""


def cpio(entries):
    """An uncompressed newc archive of (path, mode, data) entries; data None is a directory."""
    out = bytearray()
    for ino, (path, mode, data) in enumerate(entries + [("TRAILER!!!", 0, b"")], 1):
        name = path.lstrip("/").encode() + b"\0"
        data = data or b""
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(name), 0)
        out += b"070701" + "".join("%08X" % f for f in fields).encode() + name
        out += b"\0" * (-len(out) % 4) + data
        out += b"\0" * (-len(out) % 4)
    return bytes(out + b"\0" * (-len(out) % 512))


def use_kvm():
    if not os.access("/dev/kvm", os.R_OK | os.W_OK) or os.path.exists("/sys/module/kvm_pvm"):
        return False  # kvm_pvm is no hardware KVM: Debian's kernel does not boot on it
    with open("/proc/cpuinfo") as f:
        return re.search(r"^flags\s*:.*\b(vmx|svm)\b", f.read(), re.M) is not None


def overlay(a):
    """The per-run archive: the script, its variables, the files; read before the image's."""
    dirs, files = {"/sensvm"}, []
    env = ""
    for kv in a.env:
        k, eq, v = kv.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k):
            sys.exit("run.py: --env wants NAME=VALUE, not " + kv)
        env += "export %s='%s'\n" % (k, v.replace("'", "'\\''"))
    with open(a.script, "rb") as f:
        files.append(("/sensvm/script", 0o100755, f.read()))
    files.append(("/sensvm/env", 0o100644, env.encode()))
    if a.share:
        files.append(("/sensvm/share", 0o100644, b""))
    for spec in a.file:
        src, _, dst = spec.partition(":")
        dst = dst or "/files/" + os.path.basename(src)
        d = os.path.dirname(dst)
        while d not in ("/", ""):
            dirs.add(d)
            d = os.path.dirname(d)
        with open(src, "rb") as f:
            files.append((dst, 0o100000 | (os.stat(src).st_mode & 0o777), f.read()))
    return cpio([(d, 0o40755, None) for d in sorted(dirs)] + files)


def main():
    ap = argparse.ArgumentParser(
        prog="run.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("script", help="shell script to run in the guest (BusyBox sh, as root)")
    ap.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                    help="a variable for the script (repeatable)")
    ap.add_argument("--file", action="append", default=[], metavar="SRC[:DEST]",
                    help="copy a host file into the guest, at DEST or /files/NAME (repeatable)")
    ap.add_argument("--share", metavar="DIR", help="the host's DIR read-write at /host (9p)")
    ap.add_argument("--guestfwd", action="append", default=[], metavar="G:H",
                    help="guest 10.0.2.100:G -> host 127.0.0.1:H (repeatable)")
    ap.add_argument("--hostfwd", action="append", default=[], metavar="H:G",
                    help="host 127.0.0.1:H -> guest port G (repeatable)")
    ap.add_argument("--log", help="the console log (default: $SENS_VM_CACHE/logs/SCRIPT.log)")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds before the VM is killed (default 300)")
    ap.add_argument("-q", "--quiet", action="store_true", help="no console on stdout")
    ap.add_argument("--accel", choices=["auto", "kvm", "tcg"],
                    default=os.environ.get("SENS_VM_ACCEL", "auto"),
                    help="auto (the default; $SENS_VM_ACCEL) takes KVM only if it is hardware KVM")
    ap.add_argument("--mem", default="1024", help="guest memory in MiB (default 1024)")
    a = ap.parse_args()

    image = os.path.join(CACHE, "image")
    vmlinux, base = os.path.join(image, "vmlinux"), os.path.join(image, "initramfs.img")
    if not os.path.exists(os.path.join(image, "MANIFEST")):
        sys.exit("run.py: no VM image in %s: run %s/build.sh first" % (image, HERE))
    for tool, pkg in (("qemu-system-x86_64", "qemu-system-x86"), ("socat", "socat")):
        if not shutil.which(tool):
            sys.exit("run.py: no %s: apt-get install %s (or run %s/build.sh, which does)"
                     % (tool, pkg, HERE))
    accel = a.accel if a.accel != "auto" else ("kvm" if use_kvm() else "tcg")
    if a.log is None:
        os.makedirs(os.path.join(CACHE, "logs"), exist_ok=True)
        a.log = os.path.join(CACHE, "logs", os.path.basename(a.script) + ".log")

    net = "user,id=net0,restrict=on,ipv6=off,net=10.0.2.0/24,host=10.0.2.2"
    for fw in a.hostfwd:
        h, g = fw.split(":")
        net += ",hostfwd=tcp:127.0.0.1:%d-10.0.2.15:%d" % (int(h), int(g))
    for fw in a.guestfwd:
        g, h = fw.split(":")
        net += ",guestfwd=tcp:10.0.2.100:%d-cmd:socat STDIO TCP4:127.0.0.1:%d" % (int(g), int(h))
    tmp = tempfile.mkdtemp(prefix="run-", dir=CACHE)
    initrd = os.path.join(tmp, "initrd")
    with open(initrd, "wb") as out, open(base, "rb") as b:
        out.write(overlay(a))  # first: the kernel cannot tell where a legacy lz4 stream ends
        shutil.copyfileobj(b, out)
    qemu = ["qemu-system-x86_64", "-nodefaults", "-no-user-config", "-display", "none",
            "-machine", "q35", "-smp", "2", "-m", a.mem, "-no-reboot",
            "-kernel", vmlinux, "-initrd", initrd,
            "-append", "console=ttyS0 panic=-1 quiet rdinit=/init",
            "-serial", "stdio", "-monitor", "none",
            "-netdev", net, "-device", "virtio-net-pci,netdev=net0", "-device", "virtio-rng-pci"]
    qemu += ["-accel", "kvm", "-cpu", "host"] if accel == "kvm" else \
        ["-accel", "tcg,thread=multi", "-cpu", "max"]
    if os.path.exists("/usr/share/qemu/qboot.rom"):
        qemu += ["-bios", "/usr/share/qemu/qboot.rom"]  # boots faster than SeaBIOS
    if a.share:
        qemu += ["-virtfs", "local,path=%s,mount_tag=host,security_model=none,id=host"
                 % os.path.abspath(a.share)]

    def stop(signum, _frame):
        raise Stop(signum)
    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(s, stop)
    libc = ctypes.CDLL(None, use_errno=True)
    t_start = time.monotonic()
    deadline = t_start + a.timeout
    rc, boot, attempt, p = None, None, 0, None
    log = open(a.log, "w", buffering=1)
    try:
        # Multi-threaded TCG rarely (about 1 boot in 40) oopses while the kernel patches its
        # own text; a guest that crashes or hangs before the script starts is booted again.
        while rc is None and attempt < 3:
            attempt += 1
            log.write("# %s\n" % " ".join(qemu))
            t0 = time.monotonic()
            p = subprocess.Popen(qemu, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT,
                                 preexec_fn=lambda: libc.prctl(1, signal.SIGKILL))  # PDEATHSIG
            running, crashed, buf = False, False, b""
            while True:
                now = time.monotonic()
                limit = deadline if running else min(deadline, t0 + 120)
                if rc is not None:
                    limit = min(limit, t_exit + 10)  # the guest said it is done: no hang
                if now >= limit:
                    if rc is None:
                        log.write("# %s\n" % ("timeout" if running or now >= deadline else
                                              "no script after 120 s of boot"))
                    break
                if not select.select([p.stdout], [], [], limit - now)[0]:
                    continue
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for raw in lines:
                    line = "[%8.3f] %s" % (time.monotonic() - t0,
                                           raw.decode(errors="replace").rstrip("\r"))
                    log.write(line + "\n")
                    if not a.quiet:
                        print(line, flush=True)
                    if "@@SENSVM RUN" in line:
                        running, boot = True, time.monotonic() - t0
                    elif re.search(r"\] (Oops|BUG|Kernel panic)\b", line):
                        crashed = True
                    m = re.search(r"@@SENSVM EXIT (\d+)", line)
                    if m:
                        rc, t_exit = int(m.group(1)), time.monotonic()
            p.kill()
            p.wait()
            if running or time.monotonic() >= deadline:
                break
            log.write("# the guest %s before the script started\n"
                      % ("crashed" if crashed else "ended or hung"))
    except Stop as e:
        if p:
            p.kill()
            p.wait()
        log.write("# stopped by signal %d\n" % e.args[0])
        rc = 128 + e.args[0]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if rc is None:
        rc = 124 if time.monotonic() >= deadline else 125
    took = time.monotonic() - t_start
    summary = "vm: %s exited %d after %.1f s (%s, boot %s, %d attempt%s; console log %s)" % (
        os.path.basename(a.script), rc, took, accel, "%.1f s" % boot if boot else "-",
        attempt, "" if attempt == 1 else "s", a.log)
    log.write("# " + summary + "\n")
    log.close()
    print(summary, file=sys.stderr)
    sys.exit(rc)


if __name__ == "__main__":
    main()
