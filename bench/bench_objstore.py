#!/usr/bin/env python3
"""Pauses kept in an object store (cpuosd --s3-endpoint; Swift's s3api on loopback from
scripts/objstore.sh), each figure beside its baseline in the same run:

- pause of a python sandbox that ran a pandas job, on a daemon with the store and on one without,
  alternating (the upload runs after the pause: the pause itself should not change);
- how long after the pause the upload is done ("stored" in GET), and the bytes it moved;
- resume from the pause on the host's disk, beside resume after the disk lost it (the run
  directory's pause deleted), fetched from the store: what a resume on another host costs.
Each resume is timed to the answer of a run_code that reads the DataFrame back.
Run as root on a built tree: python3 bench/bench_objstore.py [N]. Prints figures; asserts
nothing."""

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_net import ROOT, Daemon, p50  # noqa: E402  (it puts the tree's SDK first on the path)
import cpuos  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5
JOB = """import numpy as np, pandas as pd
df = pd.DataFrame({"a": np.random.rand(2_000_000), "b": np.random.randint(0, 100, 2_000_000)})
means = df.groupby("b").a.mean()
len(df)"""


def store_up():
    d = tempfile.mkdtemp(prefix="cpuos-bench-objstore-")
    out = subprocess.run([os.path.join(ROOT, "scripts", "objstore.sh"), "up", d, "28380"],
                         capture_output=True, text=True, check=True).stdout
    env = dict(line[7:].split("=", 1) for line in out.splitlines() if line.startswith("export "))
    creds = os.path.join(d, "creds")
    with open(os.open(creds, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(f"{env['CPUOS_S3_ACCESS_KEY']}\n{env['CPUOS_S3_SECRET_KEY']}\n")
    return d, env["CPUOS_S3_ENDPOINT"], creds


def stored(d, sbx):
    req = urllib.request.Request(f"{d.url}/v1/sandboxes/{sbx.id}",
                                 headers={"Authorization": f"Bearer {d.key}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)["stored"]


def sandbox(d):
    sbx = cpuos.Sandbox.create(template="python", timeout="30m", api_key=d.key, api_url=d.url)
    r = sbx.run_code(JOB, timeout="5m")
    assert r.text == "2000000", r
    return sbx


def resume_ms(sbx):
    t0 = time.monotonic()
    r = sbx.run_code("len(df)", timeout="5m")
    assert r.text == "2000000", r
    return (time.monotonic() - t0) * 1000


def main():
    sdir, endpoint, creds = store_up()
    with_store = without = None
    try:
        with_store = Daemon("--s3-endpoint", endpoint, "--s3-bucket", "bench", "--s3-credentials",
                            creds, "--url-listen", "none")
        without = Daemon("--url-listen", "none")
        a, b = sandbox(with_store), sandbox(without)
        pause = {"store": [], "none": []}
        upload, local, fetched = [], [], []
        for i in range(N):
            order = (("store", a), ("none", b))
            for name, sbx in (order if i % 2 == 0 else order[::-1]):  # each first in turn
                t0 = time.monotonic()
                sbx.pause()
                pause[name].append((time.monotonic() - t0) * 1000)
                if name == "store":
                    t_store = t0
            t0 = t_store
            while not stored(with_store, a):
                time.sleep(0.05)
            upload.append((time.monotonic() - t0) * 1000)
            if i % 2 == 0:
                local.append(resume_ms(a))
            else:
                run = os.path.join(with_store.dir, "s", "vms", a.id)
                for f in ("manifest.json", "state", "mem", "scratch.qcow2"):
                    if os.path.exists(os.path.join(run, f)):
                        os.unlink(os.path.join(run, f))
                fetched.append(resume_ms(a))
            resume_ms(b)
        du = subprocess.run(["du", "-sb", os.path.join(sdir, "srv")], capture_output=True,
                            text=True).stdout.split()[0]
        print(f"object store: Swift s3api on loopback; N = {N}, python sandbox after a pandas job")
        print(f"  pause, with the store       p50 {p50(pause['store']):8.0f} ms  "
              f"without p50 {p50(pause['none']):8.0f} ms  "
              f"({p50(pause['store']) / p50(pause['none']):.3f}x)")
        print(f"  pause -> stored in the store p50 {p50(upload):8.0f} ms  "
              f"(the store holds {int(du) / 1e6:.0f} MB)")
        print(f"  resume from this disk       p50 {p50(local):8.0f} ms  (n={len(local)})")
        print(f"  resume from the store       p50 {p50(fetched):8.0f} ms  (n={len(fetched)}, "
              f"{p50(fetched) / p50(local):.2f}x)")
        a.kill()
        b.kill()
    finally:
        for d in (with_store, without):
            if d:
                d.stop()
        subprocess.run([os.path.join(ROOT, "scripts", "objstore.sh"), "down", sdir])


if __name__ == "__main__":
    main()
