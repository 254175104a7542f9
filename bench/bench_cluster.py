#!/usr/bin/env python3
"""What a cpuos-api replica costs in front of a node (cpuosd --node on a PostgreSQL of its own,
scripts/pg.sh), each figure beside its baseline in the same run, alternating: the same requests
straight to the node (with the cluster secret, as a replica sends them) and through the replica.

- create -> first exec of a base sandbox (the replica places it, reserves, relays);
- a small request's round trip (GET /v1/sandboxes/{id}), and exec of `true`;
- upload and download of 64 MiB through files, in MB/s.
Run as root on a built tree: python3 bench/bench_cluster.py [N]. Prints figures; asserts nothing."""

import hashlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_net import GUEST_DIR, ROOT, p50, ready  # noqa: E402  (the tree's SDK first on the path)
import cpuos  # noqa: E402
import cpuos._client  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 5


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Target:
    """Where requests go: `url`, `key`, and headers every request carries."""

    def __init__(self, url, key, headers=None):
        self.url, self.key, self.headers = url, key, headers or {}

    def create(self):
        return cpuos.Sandbox.create(template="base", timeout="10m", api_key=self.key,
                                    api_url=self.url)

    def get_ms(self, sid):
        host, port = self.url[7:].split(":")
        t0 = time.monotonic()
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        c.request("GET", f"/v1/sandboxes/{sid}",
                  headers={"Authorization": f"Bearer {self.key}", **self.headers})
        r = c.getresponse()
        r.read()
        c.close()
        assert r.status == 200, r.status
        return (time.monotonic() - t0) * 1000


def send_secret_to(url, secret):
    """The SDK, for requests straight to the node, shows the secret as a replica does."""
    open_ = cpuos._client.Client.open

    def opened(self, method, path, query=None, json_body=None, body=None, headers=None, **kw):
        if self.api_url == url:
            headers = {**(headers or {}), "cpuos-cluster": secret}
        return open_(self, method, path, query, json_body, body, headers, **kw)
    cpuos._client.Client.open = opened


def main():
    work = tempfile.mkdtemp(prefix="cpuos-bench-cluster-")
    os.chmod(work, 0o711)
    pg = subprocess.run([os.path.join(ROOT, "scripts", "pg.sh"), "up", os.path.join(work, "pg"),
                         str(free_port())], capture_output=True, text=True, check=True).stdout
    env = dict(line[7:].split("=", 1) for line in pg.splitlines() if line.startswith("export "))
    url = env["CPUOS_PG_URL"]
    secret_file = os.path.join(work, "secret")
    secret = os.urandom(24).hex()
    with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(secret + "\n")
    node_port, api_port = free_port(), free_port()
    sock = os.path.join(work, "run", "d.sock")
    procs = []
    try:
        procs.append(subprocess.Popen(
            [os.path.join(ROOT, "build", "bin", "cpuosd"), "--state-dir", os.path.join(work, "s"),
             "--socket", sock, "--listen", f"127.0.0.1:{node_port}", "--guest-dir", GUEST_DIR,
             "--pool-python", "0", "--database", url, "--node", "n1", "--cluster-secret",
             secret_file], stdout=open(os.path.join(work, "node.log"), "wb"),
            stderr=subprocess.STDOUT, env={**os.environ, **env}))
        for _ in range(600):
            if os.path.exists(sock):
                break
            time.sleep(0.1)
        time.sleep(0.5)
        out = subprocess.run(["curl", "-s", "--retry", "20", "--retry-connrefused",
                              "--unix-socket", sock, "-X", "POST", "http://x/v1/keys",
                              "-d", '{"name":"bench"}'], capture_output=True, text=True).stdout
        key = json.loads(out)["key"]
        procs.append(subprocess.Popen(
            [os.path.join(ROOT, "build", "bin", "cpuos-api"), "--listen", f"127.0.0.1:{api_port}",
             "--database", url, "--cluster-secret", secret_file],
            stdout=open(os.path.join(work, "api.log"), "wb"), stderr=subprocess.STDOUT,
            env={**os.environ, **env}))
        time.sleep(0.5)
        direct = Target(f"http://127.0.0.1:{node_port}", key, {"cpuos-cluster": secret})
        relay = Target(f"http://127.0.0.1:{api_port}", key)
        send_secret_to(direct.url, secret)
        # ready() creates until the node's log (<dir>/log) says the snapshot is there
        direct.dir = work
        os.symlink(os.path.join(work, "node.log"), os.path.join(work, "log"))
        ready(direct)

        both = (("node", direct), ("api", relay))
        creates = {n: [] for n, _ in both}
        for _ in range(N):
            for name, t in both:
                t0 = time.monotonic()
                s = t.create()
                s.exec("true")
                creates[name].append((time.monotonic() - t0) * 1000)
                s.kill()
        s = direct.create()
        gets, execs = {n: [] for n, _ in both}, {n: [] for n, _ in both}
        views = {"node": s, "api": cpuos.Sandbox.connect(s.id, api_key=key, api_url=relay.url)}
        for _ in range(N * 20):
            for name, t in both:
                gets[name].append(t.get_ms(s.id))
                t0 = time.monotonic()
                views[name].exec("true")
                execs[name].append((time.monotonic() - t0) * 1000)
        blob = os.urandom(64 << 20)
        digest = hashlib.sha256(blob).hexdigest()
        up, down = {n: [] for n, _ in both}, {n: [] for n, _ in both}
        for _ in range(max(2, N // 2)):
            for name, _ in both:
                v = views[name]
                t0 = time.monotonic()
                v.files.write("/work/blob", blob)
                up[name].append(64 * 1.048576 / (time.monotonic() - t0))
                t0 = time.monotonic()
                got = v.files.read("/work/blob")
                down[name].append(64 * 1.048576 / (time.monotonic() - t0))
                assert hashlib.sha256(got).hexdigest() == digest
        s.kill()
        print(f"cluster relay (N = {N}; one node, one cpuos-api, PostgreSQL on loopback):")
        for label, d, unit in (("create -> first exec", creates, "ms"),
                               ("GET /v1/sandboxes/{id}", gets, "ms"),
                               ("exec true", execs, "ms"),
                               ("upload 64 MiB", up, "MB/s"),
                               ("download 64 MiB", down, "MB/s")):
            a, b = p50(d["node"]), p50(d["api"])
            extra = f"+{b - a:.2f} ms" if unit == "ms" else f"{100 * b / a:.0f} % kept"
            print(f"  {label:24s} node {a:8.2f} {unit}  api {b:8.2f} {unit}  ({extra}, p50)")
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        # a node stopped leaves its QEMUs running (the next start takes them over): none will
        subprocess.run(["pkill", "-KILL", "-f", os.path.join(work, "s") + "/"], capture_output=True)
        subprocess.run([os.path.join(ROOT, "scripts", "pg.sh"), "down", os.path.join(work, "pg")],
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
