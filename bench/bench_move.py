#!/usr/bin/env python3
"""A sandbox resumed on another node than its own, beside a resume on its own node, in the same
run, alternating: a local cluster (scripts/cluster.sh: PostgreSQL, the object store, two nodes in
network namespaces, two replicas, HAProxy) and one python sandbox that ran a pandas job.

Each round, on the node that holds it:
- own node: pause, then resume (timed to the answer of a run_code that reads the DataFrame back);
- another node: pause, wait until the pause is stored, `drain --move` of its node (it is let go
  of and taken, paused, by the other node), then resume there (the same run_code: the pause is
  fetched from the object store), and the node made ready again;
- a running sandbox moved whole: `drain --move` of its node, timed to its answer (pause, upload,
  hand-over, fetch and resume on the other node).
Run as root on a built tree: python3 bench/bench_move.py [N]. Prints figures; asserts nothing."""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_net import ROOT, p50  # noqa: E402  (the tree's SDK first on the path)
import cpuos  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 3
SCRIPT = os.path.join(ROOT, "scripts", "cluster.sh")
JOB = """import numpy as np, pandas as pd
df = pd.DataFrame({"a": np.random.rand(2_000_000), "b": np.random.randint(0, 100, 2_000_000)})
means = df.groupby("b").a.mean()
len(df)"""


def port_block(n=100):
    for _ in range(50):
        base = 20000 + int.from_bytes(os.urandom(2), "big") % 30000
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise SystemExit("no block of free ports")


def admin(d, node, method, path, body=None):
    args = ["curl", "-sS", "--unix-socket", os.path.join(d, node, "run", "cpuosd.sock"),
            "-X", method, f"http://x{path}"]
    if body is not None:
        args += ["-d", json.dumps(body)]
    return json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)


def resume_ms(sbx):
    t0 = time.monotonic()
    r = sbx.run_code("len(df)", timeout="5m")
    assert r.text == "2000000", r
    return (time.monotonic() - t0) * 1000


def main():
    d = tempfile.mkdtemp(prefix="cpuos-bench-move-")
    env = {**os.environ, "CPUOS_CLUSTER_PORT": str(port_block())}
    try:
        out = subprocess.run([SCRIPT, "up", d, "2"], capture_output=True, text=True, env=env)
        if out.returncode:
            raise SystemExit(out.stderr[-2000:])
        ex = dict(line[7:].split("=", 1) for line in out.stdout.splitlines()
                  if line.startswith("export "))
        sbx = cpuos.Sandbox.create(template="python", timeout="1h", api_key=ex["CPUOS_API_KEY"],
                                   api_url=ex["CPUOS_API_URL"])
        r = sbx.run_code(JOB, timeout="5m")
        assert r.text == "2000000", r
        own, other, whole = [], [], []
        for _ in range(N):
            sbx.pause()
            own.append(resume_ms(sbx))
            sbx.pause()
            while not sbx.client.request("GET", f"/v1/sandboxes/{sbx.id}")["stored"]:
                time.sleep(0.05)
            was = sbx.info().node
            moved = admin(d, was, "POST", f"/v1/nodes/{was}/drain", {"move": True})["moved"]
            assert [m.get("node") for m in moved] == [({"node-1", "node-2"} - {was}).pop()], moved
            other.append(resume_ms(sbx))
            admin(d, was, "POST", f"/v1/nodes/{was}/undrain")
            was = sbx.info().node
            t0 = time.monotonic()
            moved = admin(d, was, "POST", f"/v1/nodes/{was}/drain", {"move": True})["moved"]
            whole.append((time.monotonic() - t0) * 1000)
            assert moved[0].get("resumed") is True, moved
            assert resume_ms(sbx) < 60_000  # it runs where it went, its DataFrame with it
            admin(d, was, "POST", f"/v1/nodes/{was}/undrain")
        print(f"moves between two nodes (scripts/cluster.sh, TCG); N = {N}, python sandbox after "
              f"a pandas job")
        print(f"  resume on its own node            p50 {p50(own):8.0f} ms")
        print(f"  resume on another node            p50 {p50(other):8.0f} ms  "
              f"({p50(other) / p50(own):.2f}x: the pause fetched from the object store)")
        print(f"  a running sandbox moved whole     p50 {p50(whole):8.0f} ms  (drain --move: "
              f"pause, upload, hand-over, fetch, resume)")
        sbx.kill()
    finally:
        subprocess.run([SCRIPT, "down", d], capture_output=True, env=env)
        subprocess.run(["rm", "-rf", d])


if __name__ == "__main__":
    main()
