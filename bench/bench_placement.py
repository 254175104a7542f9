#!/usr/bin/env python3
"""Placement at scale, simulated: cpuos-api replicas placing creates over many nodes on a real
PostgreSQL (scripts/pg.sh), where the nodes are fakes that answer every create at once (no VMs:
what is measured is the replicas and the database). The nodes' rows are real and so are their
loads: 100 running sandboxes per node in the sandboxes table, summed by every placement.

For 10 nodes and then for N nodes (default 100): C creates (default 10,000) from 4 replicas at
once, each create its own connection as an SDK's would be: creates per second, a create's p50 and
p99 through the replica, and PostgreSQL's transactions and time (from pg_stat_database) per create.
Run on a built tree: python3 bench/bench_placement.py [N] [C]; CPUOS_API_ARGS="--node-max-starting
0" (for example) adds arguments to the replicas. Prints figures; asserts nothing."""

import hashlib
import http.client
import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NODES = int(sys.argv[1]) if len(sys.argv) > 1 else 100
CREATES = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
REPLICAS = 4
CLIENTS = 32
ACCOUNTS = 32


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeNode(http.server.BaseHTTPRequestHandler):
    """A node that makes every sandbox it is asked for at once."""
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = b'{"id":"sbx_0000000000000000","state":"running"}'
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def psql(env, url, sql):
    out = subprocess.run(["psql", "-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-c", sql, url],
                         capture_output=True, text=True, env={**os.environ, **env}, check=True)
    return out.stdout.strip()


def create_once(port, key):
    t0 = time.monotonic()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", "/v1/sandboxes", body=b'{"template":"base"}',
              headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status, (time.monotonic() - t0) * 1000


def run(env, url, secret_file, key, n_nodes, creates, servers):
    psql(env, url, "DELETE FROM sandboxes; DELETE FROM nodes; DELETE FROM reservations")
    far = int(time.time() * 1000) + 3600 * 1000
    rows = ",".join(f"('fake-{i:03d}', 'http://127.0.0.1:{servers[i].server_address[1]}', 'ready', "
                    f"0, 1, {far}, 0, 64, 1000000)" for i in range(n_nodes))
    psql(env, url, "INSERT INTO nodes (name, url, state, drained, epoch, lease_until_ms, joined_at, "
                   f"vcpus, memory_mb) VALUES {rows}")
    # 100 running sandboxes on each node, whose sums every placement reads
    psql(env, url, "INSERT INTO accounts (name, created_at) VALUES ('load', 0) "
                   "ON CONFLICT DO NOTHING")
    psql(env, url, "INSERT INTO sandboxes (id, account, template, state, vcpus, memory_mb, disk_mb, "
                   "created_at, expires_at, node, node_epoch) SELECT 'sbx_' || lpad(to_hex(g), 16, "
                   "'0'), 'load', 'base', 'running', 1, 512, 2048, 0, 0, 'fake-' || lpad((g % "
                   f"{n_nodes})::text, 3, '0'), 1 FROM generate_series(1, {100 * n_nodes}) g")
    psql(env, url, "ANALYZE")
    ports = []
    procs = []
    for i in range(REPLICAS):
        p = free_port()
        ports.append(p)
        procs.append(subprocess.Popen(
            [os.path.join(ROOT, "build", "bin", "cpuos-api"), "--listen", f"127.0.0.1:{p}",
             "--database", url, "--cluster-secret", secret_file, "--max-sandboxes", "1000000",
             "--log-level", "warn", *os.environ.get("CPUOS_API_ARGS", "").split()],
            env={**os.environ, **env}, stderr=subprocess.DEVNULL))
    for p in ports:
        for _ in range(100):
            try:
                c = http.client.HTTPConnection("127.0.0.1", p, timeout=5)
                c.request("GET", "/v1/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.1)
    stat = ("SELECT xact_commit + xact_rollback, active_time FROM pg_stat_database "
            "WHERE datname = current_database()")
    x0, a0 = map(float, psql(env, url, stat).split("|"))
    t0 = time.monotonic()
    with ThreadPoolExecutor(CLIENTS) as pool:
        got = list(pool.map(lambda i: create_once(ports[i % REPLICAS], key[i % len(key)]),
                            range(creates)))
    wall = time.monotonic() - t0
    time.sleep(0.6)  # pg_stat_database is updated at most every 500 ms
    x1, a1 = map(float, psql(env, url, stat).split("|"))
    for p in procs:
        p.terminate()
        p.wait(30)
    ok = [ms for status, ms in got if status == 201]
    lat = sorted(ms for _, ms in got)
    return {"nodes": n_nodes, "ok": len(ok), "failed": creates - len(ok), "per_s": creates / wall,
            "p50": statistics.median(lat), "p99": lat[int(len(lat) * 0.99) - 1],
            "xacts": (x1 - x0) / creates, "pg_ms": (a1 - a0) / creates}


def main():
    work = tempfile.mkdtemp(prefix="cpuos-bench-placement-")
    os.chmod(work, 0o711)
    pg = subprocess.run([os.path.join(ROOT, "scripts", "pg.sh"), "up", os.path.join(work, "pg"),
                         str(free_port())], capture_output=True, text=True, check=True).stdout
    env = dict(line[7:].split("=", 1) for line in pg.splitlines() if line.startswith("export "))
    url = env["CPUOS_PG_URL"]
    secret_file = os.path.join(work, "secret")
    with open(os.open(secret_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(os.urandom(24).hex() + "\n")
    servers = []
    try:
        for _ in range(NODES):
            s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeNode)
            s.daemon_threads = True
            threading.Thread(target=s.serve_forever, daemon=True).start()
            servers.append(s)
        # the schema, made by a replica's first connection; a key made as a node would
        probe = subprocess.Popen([os.path.join(ROOT, "build", "bin", "cpuos-api"), "--listen",
                                  f"127.0.0.1:{free_port()}", "--database", url, "--cluster-secret",
                                  secret_file], env={**os.environ, **env}, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if psql(env, url, "SELECT count(*) FROM pg_tables WHERE tablename = 'reservations'") == "1":
                break
            time.sleep(0.1)
        probe.terminate()
        probe.wait(30)
        # the creates of ACCOUNTS accounts (one account's creates queue on its quota's lock)
        secrets = ["cpuos_" + os.urandom(32).hex() for _ in range(ACCOUNTS)]
        for i, secret in enumerate(secrets):
            psql(env, url, f"INSERT INTO accounts (name, created_at) VALUES ('bench-{i}', 0)")
            psql(env, url, "INSERT INTO keys (id, name, account, sha256, created_at) VALUES "
                           f"('key_{i:016x}', 'bench', 'bench-{i}', "
                           f"'{hashlib.sha256(secret.encode()).hexdigest()}', 0)")
        print(f"placement at scale ({REPLICAS} cpuos-api replicas, {CLIENTS} clients, {ACCOUNTS} "
              "accounts, fake nodes that answer at once, 100 running sandboxes a node, "
              "PostgreSQL on loopback, K = 2):")
        for n in sorted({min(10, NODES), NODES}):
            r = run(env, url, secret_file, secrets, n, CREATES, servers)
            print(f"  {r['nodes']:4d} nodes: {CREATES} creates, {r['failed']} failed, "
                  f"{r['per_s']:7.0f} creates/s, p50 {r['p50']:6.2f} ms, p99 {r['p99']:6.2f} ms, "
                  f"PostgreSQL {r['xacts']:.1f} transactions and {r['pg_ms']:.2f} ms a create")
    finally:
        for s in servers:
            s.shutdown()
        subprocess.run([os.path.join(ROOT, "scripts", "pg.sh"), "down", os.path.join(work, "pg")],
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
