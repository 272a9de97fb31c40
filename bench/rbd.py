#!/usr/bin/env python3
"""RBD namespace vs librbd (issue 14): does the gateway add little?

One image, one run: librbd's own rate (build/sens_rbd_bench, on librbd's asynchronous C API)
and `sens perf` against `sens target --ns rbd:POOL/IMAGE` on the same image, 4 KiB random reads
and writes at QD 32, REPS interleaved repetitions of each, medians. The bar: the target's IOPS
at least 0.8x librbd's. Writes the rows as JSON (--json) and prints a markdown table.

The cluster: an existing one (--conf, or $CEPH_CONF), or with --start a fresh one-node
cluster from tests/rbd/cluster.sh in build/ceph-bench (removed at the end unless --keep).
The image is created (--size) and filled sequentially first, so that reads hit allocated
objects. The machine is shared and 2 cores carry the OSD, the monitor, librbd, the
target and the host: read the numbers as ratios within one run.

    bench/rbd.py --start --json docs/results/rbd.json
"""
import argparse, json, os, shutil, socket, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def rt(a):
    return ["chrt", "-f", "10"] if a.rt else []


def librbd_point(a, rw, d):
    out = os.path.join(d, "b.json")
    subprocess.run(rt(a) + [a.bench, "--conf", a.conf, "--pool", a.pool, "--image", a.image,
                            "--rw", rw, "--bs", "4k", "--qd", str(a.qd), "--time", str(a.time),
                            "--warmup", "1", "--size", a.size, "--json", out],
                   check=True, stdout=subprocess.DEVNULL, timeout=a.time + 120)
    j = json.load(open(out))
    return {"iops": j["iops"], "lat_avg_us": j["mean_latency_us"]}


def target_point(a, trid, rw, d):
    out = os.path.join(d, "p.json")
    subprocess.run(rt(a) + [a.sens, "perf", "-r", trid, "-q", "--rw", rw, "--bs", "4k",
                            "--qd", str(a.qd), "--time", str(a.time), "--warmup", "1",
                            "--size", a.size, "--json", out] + a.perf_args.split(),
                   check=True, stdout=subprocess.DEVNULL, timeout=a.time + 120)
    j = json.load(open(out))
    return {"iops": j["iops"], "lat_avg_us": j["clat_ns"]["mean"] / 1e3}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sens", default="build/sens")
    ap.add_argument("--bench", default=None, help="sens_rbd_bench (default: beside --sens)")
    ap.add_argument("--conf", default=os.environ.get("CEPH_CONF"))
    ap.add_argument("--start", action="store_true", help="start a cluster of our own")
    ap.add_argument("--keep", action="store_true", help="leave the --start cluster running")
    ap.add_argument("--pool", default="rbd")
    ap.add_argument("--image", default="sensbench")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--qd", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--time", type=float, default=5)
    ap.add_argument("--rt", action="store_true", help="run the clients under chrt -f 10")
    ap.add_argument("--target-args", default="", help="extra sens target options")
    ap.add_argument("--perf-args", default="", help="extra sens perf options")
    ap.add_argument("--rws", default="randread,randwrite")
    ap.add_argument("--json")
    a = ap.parse_args()
    a.bench = a.bench or os.path.join(os.path.dirname(os.path.abspath(a.sens)), "sens_rbd_bench")
    script = os.path.join(HERE, "..", "tests", "rbd", "cluster.sh")
    env = dict(os.environ)
    if a.start:
        base = os.path.abspath(os.path.join(os.path.dirname(a.sens), "ceph-bench"))
        v2 = free_port()
        v1 = free_port()
        while v1 == v2:
            v1 = free_port()
        # No image of the script's own: the one measured is made below (--image, --size).
        env.update(CLUSTER_DIR=base, CLUSTER_MON_PORT=str(v2), CLUSTER_MON_V1_PORT=str(v1),
                   CLUSTER_IMAGE="")
        # its progress (and, when it fails, the step and the daemon logs) on stderr
        if subprocess.run([script, "start"], env=env, stdout=sys.stderr).returncode != 0:
            subprocess.run([script, "stop"], env=env, stdout=sys.stderr)
            sys.exit(f"{script} start failed: logs in {base}/log; "
                     f"remove it with CLUSTER_DIR={base} {script} clean")
        a.conf = os.path.join(base, "ceph.conf")
    if not a.conf:
        sys.exit("no cluster: --conf, $CEPH_CONF or --start")
    rbd = ["rbd", "--conf", a.conf]
    target = None
    d = None
    try:
        have = subprocess.run(rbd + ["info", f"{a.pool}/{a.image}"], capture_output=True)
        if have.returncode != 0:
            subprocess.run(rbd + ["create", "--size", a.size, f"{a.pool}/{a.image}"], check=True)
            subprocess.run(rbd + ["bench", "--io-type", "write", "--io-pattern", "seq",
                                  "--io-size", "4M", "--io-threads", "4", "--io-total", a.size,
                                  f"{a.pool}/{a.image}"], check=True, stdout=subprocess.DEVNULL)
        port = free_port()
        nqn = "nqn.2026-11.io.sens-target:rbdbench"
        d = tempfile.mkdtemp(prefix="sens-rbdbench-")
        log = open(os.path.join(d, "target.log"), "w")
        target = subprocess.Popen(rt(a) + [a.sens, "target", "--listen", f"127.0.0.1:{port}",
                                           "--discovery-port", "0", "--nqn", nqn, "--ns",
                                           f"rbd:{a.pool}/{a.image},conf={a.conf}"]
                                  + a.target_args.split(), stdout=log, stderr=subprocess.STDOUT)
        trid = f"trtype:tcp traddr:127.0.0.1 trsvcid:{port} subnqn:{nqn}"
        for _ in range(200):
            if "listening on" in open(log.name).read():
                break
            if target.poll() is not None:
                sys.exit("target failed:\n" + open(log.name).read())
            time.sleep(0.1)
        rows = []
        for rw in a.rws.split(","):
            lib, tgt = [], []
            for rep in range(a.reps):  # interleaved: librbd, target, librbd, target, ...
                lib.append(librbd_point(a, rw, d))
                tgt.append(target_point(a, trid, rw, d))
                print(f"{rw} rep {rep}: librbd {lib[-1]['iops']:.0f} IOPS, "
                      f"target {tgt[-1]['iops']:.0f} IOPS", file=sys.stderr)
            lib_iops = statistics.median(p["iops"] for p in lib)
            tgt_iops = statistics.median(p["iops"] for p in tgt)
            rows.append({"rw": rw, "bs": 4096, "qd": a.qd,
                         "librbd_iops": lib_iops, "target_iops": tgt_iops,
                         "ratio": tgt_iops / lib_iops,
                         "librbd_lat_avg_us": statistics.median(p["lat_avg_us"] for p in lib),
                         "target_lat_avg_us": statistics.median(p["lat_avg_us"] for p in tgt),
                         "librbd_reps": [p["iops"] for p in lib],
                         "target_reps": [p["iops"] for p in tgt]})
        print("| 4 KiB QD%d | librbd IOPS | target IOPS | target / librbd | lat avg us (librbd / target) |" % a.qd)
        print("|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['rw']} | {r['librbd_iops']:.0f} | {r['target_iops']:.0f} | "
                  f"{r['ratio']:.2f}x | {r['librbd_lat_avg_us']:.0f} / {r['target_lat_avg_us']:.0f} |")
        if a.json:
            meta = {"reps": a.reps, "seconds": a.time, "region": a.size, "rt": a.rt,
                    "target_args": a.target_args, "perf_args": a.perf_args, "nproc": os.cpu_count(),
                    "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            with open(a.json, "w") as f:
                json.dump({"meta": meta, "rows": rows}, f, indent=2)
                f.write("\n")
    finally:
        if target is not None:
            target.terminate()
            target.wait(timeout=60)
        if d is not None:
            shutil.rmtree(d, ignore_errors=True)
        if a.start and not a.keep:
            subprocess.run([script, "clean"], env=env, stdout=sys.stderr)


if __name__ == "__main__":
    main()
