"""cpuos-api replicas in front of node daemons on one real PostgreSQL: a node's listener serves
only the holders of the cluster secret; creates are placed over the nodes and reserved against the
account's quota across the cluster, also from two replicas at once; every other request reaches the
sandbox's own node through any replica, streaming both ways (exec's NDJSON, code, uploads with a
length and chunked, downloads), and port URLs (HTTP and WebSocket) through the replica's port
listener; a replica killed mid-request leaves the other serving and loses nothing; a paused
sandbox of a node lost resumes on another through the same URL, the replicas having forgotten its
old route when PostgreSQL announced the move, and one whose pause was not stored waits for its
node; a drain with move hands a node's sandboxes, running and paused, to another node."""

import hashlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse

import pytest

import cpuos
from conftest import ROOT, SLOW, Daemon, PgServer, free_port
from test_objstore import BUCKET, ObjStore
from test_ports import PORT, bare, request, start_server, ws_connect, ws_recv, ws_send

API_BIN = os.environ.get("CPUOS_API_BIN") or os.path.join(ROOT, "build", "bin", "cpuos-api")
LEASE = 3 * SLOW


@pytest.fixture(scope="module")
def pg():
    s = PgServer()
    yield s
    s.close()


@pytest.fixture(scope="module")
def objstore():
    s = ObjStore()
    yield s
    s.close()


@pytest.fixture(scope="module")
def secret():
    d = tempfile.mkdtemp(prefix="cpuos-secret-", dir="/tmp")
    path = os.path.join(d, "cluster.secret")
    value = os.urandom(24).hex()
    with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(value + "\n")
    yield path, value
    os.unlink(path)
    os.rmdir(d)


class Api:
    """A cpuos-api process: `url`, `log_tail`."""

    def __init__(self, pg, secret_path, *args):
        if not os.path.exists(API_BIN):
            pytest.fail(f"{API_BIN} does not exist: build it first (make all)", pytrace=False)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tempfile.mktemp(prefix="cpuos-api-", suffix=".log", dir="/tmp")
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [API_BIN, "--listen", f"127.0.0.1:{self.port}", "--database", pg.url,
                 "--cluster-secret", secret_path, *args],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **pg.env})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"cpuos-api exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.health()["nodes"] >= 1:
                    return
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"cpuos-api saw no node within 30 s:\n{self.log_tail()}")

    def health(self):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("GET", "/v1/health")
            return json.loads(c.getresponse().read())
        finally:
            c.close()

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


@pytest.fixture
def cluster(pg, secret, monkeypatch):
    """make_node(name, *args) and make_api(*args), all closed after the test."""
    monkeypatch.delenv("CPUOS_E2E_PG", raising=False)  # these name their database themselves
    path, value = secret
    made = []

    def make_node(name, *extra, env=None):
        d = Daemon(extra_args=["--database", pg.url, "--node", name, "--node-lease", str(LEASE),
                               "--cluster-secret", path, *extra])
        d.headers = {"cpuos-cluster": value}
        made.append(d)
        d.start(env={**pg.env, **(env or {})})
        return d

    def make_api(*args):
        a = Api(pg, path, *args)
        made.append(a)
        return a

    yield make_node, make_api
    for x in reversed(made):
        x.close()
    pg.query("DELETE FROM sandbox_meta; DELETE FROM sandboxes; DELETE FROM usage_events; "
             "DELETE FROM reservations; DELETE FROM nodes")


def api_call(api, method, path, key):
    c = http.client.HTTPConnection("127.0.0.1", api.port, timeout=60)
    try:
        c.request(method, path, headers={"Authorization": f"Bearer {key}"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def sh(sbx, cmd):
    r = sbx.exec(cmd, timeout="60s")
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout.strip()


def wait_for(what, cond, limit):
    deadline = time.monotonic() + limit * SLOW
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} within {limit * SLOW} s")


def test_a_node_serves_only_the_holders_of_the_secret(cluster, secret):
    make_node, make_api = cluster
    value = secret[1]
    a = make_node("node-a")
    key = a.create_key("gate")
    r = a.http("GET", "/v1/sandboxes", key=key, headers={"cpuos-cluster": "not-the-secret"})
    assert r.status == 403 and r.json()["error"]["code"] == "not_internal", r
    a.headers = {}
    assert a.http("GET", "/v1/health").status == 403
    assert a.http("GET", "/v1/sandboxes", unix=True).status == 200  # the administrator's socket
    api = make_api()
    assert api.health() == {"status": "ok", "role": "api", "nodes": 1}
    # A node's /internal routes are the cluster's own: behind the secret, with no key, and never
    # through a replica (which adds the secret to what it passes on).
    a.headers = {"cpuos-cluster": value}
    r = a.http("POST", "/internal/sandboxes/sbx_none/take", body={})
    assert r.status == 404 and r.json()["error"]["code"] == "not_found", r
    r = a.http("POST", "/internal/nodes/node-a/move", body={})  # only once drained
    assert r.status == 409 and "not drained" in r.json()["error"]["message"], r
    a.headers = {}
    assert a.http("POST", "/internal/sandboxes/sbx_none/take", body={}).status == 403
    st, body = api_call(api, "POST", "/internal/sandboxes/sbx_none/take", key)
    assert st == 404 and b"no such route" in body, (st, body)
    st, body = api_call(api, "POST", "/internal/nodes/node-a/move", key)
    assert st == 404, (st, body)
    # Whatever a client sends as a secret is not passed on: the replica's own goes.
    s = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
    try:
        assert sh(s, "echo through") == "through"
    finally:
        s.kill()


def test_creates_spread_and_every_request_reaches_its_node(cluster):
    make_node, make_api = cluster
    a, b = make_node("node-a"), make_node("node-b")
    key = a.create_key("spread")
    api = make_api()
    # K = 2 of 2 nodes: each create goes to the less loaded one.
    boxes = [cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url) for _ in range(4)]
    try:
        assert sorted(s.info().node for s in boxes) == ["node-a", "node-a", "node-b", "node-b"]
        s = boxes[0]
        # exec, streamed: lines come as they are written
        lines, t0 = [], time.monotonic()
        p = s.exec("for i in 1 2 3; do echo $i; sleep 0.3; done", background=True)
        for kind, text in p.stream():
            lines.append((time.monotonic() - t0, text))
        assert "".join(t for _, t in lines).split() == ["1", "2", "3"]
        assert lines[-1][0] - lines[0][0] >= 0.4, lines  # not held whole
        # files both ways, with a length and chunked, 8 MB
        blob = os.urandom(8 << 20)
        s.files.write("/work/blob", blob)
        assert hashlib.sha256(s.files.read("/work/blob")).hexdigest() == hashlib.sha256(blob).hexdigest()
        s.files.write("/work/chunked", iter([blob[:3 << 20], blob[3 << 20:]]))
        assert sh(s, "sha256sum /work/chunked").split()[0] == hashlib.sha256(blob).hexdigest()
        # a session id names its sandbox (resume takes one), and is routed to its node as the
        # id is: a replica that sent it anywhere would meet the other node's 421 half the time
        for b in boxes:
            for _ in range(4):
                status, body = api_call(api, "POST", f"/v1/sandboxes/ses_{b.id[4:]}/resume", key)
                assert status == 200 and json.loads(body)["id"] == b.id, body
        # a path a node would decode into a create is refused, not passed around placement
        status, body = api_call(api, "POST", "/v1/%73andboxes", key)
        assert status == 400 and b"escapes" in body, body
        # a create whose client waits for 100 Continue gets it from the replica
        out = subprocess.run(["curl", "-s", "-H", f"Authorization: Bearer {key}", "-H",
                              "Expect: 100-continue", "-H", "Content-Type: application/json",
                              "--expect100-timeout", "30", "-d", '{"template": "base"}',
                              f"{api.url}/v1/sandboxes"], capture_output=True, text=True, timeout=120)
        made = json.loads(out.stdout)
        assert made["state"] == "running", out
        cpuos.Sandbox.connect(made["id"], api_key=key, api_url=api.url).kill()
        # the account's requests reach any node and see the whole cluster
        listed = cpuos.Sandbox.list(api_key=key, api_url=api.url)
        assert {x.id for x in listed if x.state == "running"} == {x.id for x in boxes}
        # pause and resume through the replica; a second replica reaches it too
        s.pause()
        other = make_api()
        s2 = cpuos.Sandbox.connect(s.id, api_key=key, api_url=other.url)
        assert sh(s2, "cat /work/blob | wc -c") == str(8 << 20)
        assert a.http("GET", "/v1/sandboxes/sbx_0123456789abcdef", key=key).status == 404
        with pytest.raises(cpuos.NotFoundError):
            cpuos.Sandbox.connect("sbx_0123456789abcdef", api_key=key, api_url=api.url)
    finally:
        for s in boxes:
            s.kill()


def test_placement_prefers_a_free_warm_vm_of_the_template(cluster, pg):
    make_node, make_api = cluster
    a, b = make_node("node-a"), make_node("node-b", "--pool-other", "1")
    key = a.create_key("warm")
    api = make_api()
    # node-b runs one sandbox already, so by load alone node-a would take the next one
    r = b.http("POST", "/v1/sandboxes", body={"template": "base"}, key=key)
    assert r.status == 201, r
    first = r.json()["id"]

    def offers(name):
        # (all three are '' until the node's first renewal says what it has)
        return pg.query(f"SELECT compat || '|' || warm || '|' || held FROM nodes "
                        f"WHERE name = '{name}'").split("|")

    wait_for("node-b's warm base VM in its row", lambda: "base:1" in offers("node-b")[1], 120)
    wait_for("node-a's base snapshot in its row", lambda: "base" in offers("node-a")[2].split(","), 60)
    ca, cb = offers("node-a"), offers("node-b")
    assert len(ca[0]) == 16 and ca[0] == cb[0], (ca, cb)  # one host: one kind of snapshot
    assert ca[1] == "" and "base" in ca[2].split(","), ca  # no pool; its snapshot held
    listed = {n["name"]: n for n in a.http("GET", "/v1/nodes", unix=True).json()["nodes"]}
    free = shutil.disk_usage(a.state_dir).free >> 20  # what placement weighs the disk by
    assert abs(listed["node-a"]["disk_free_mb"] - free) < 4096, (listed["node-a"], free)
    s = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
    try:
        assert s.info().node == "node-b"
        # another size than the pools': load alone, so node-a
        big = cpuos.Sandbox.create(template="base", memory_mb=640, api_key=key, api_url=api.url)
        assert big.info().node == "node-a"
        big.kill()
    finally:
        s.kill()
        b.http("DELETE", f"/v1/sandboxes/{first}", key=key)


def test_quotas_hold_across_replicas_creating_at_once(cluster, pg):
    make_node, make_api = cluster
    a, b = make_node("node-a"), make_node("node-b")
    key = a.create_key("quota")
    # and each node starts one at a time, whichever replica asks: the others wait their turn
    limits = ("--max-sandboxes", "3", "--node-max-starting", "1")
    apis = [make_api(*limits), make_api(*limits)]
    results, made, busiest = [], [], []
    lock = threading.Lock()
    done = threading.Event()

    def watch():
        while not done.is_set():
            busiest.append(int(pg.query("SELECT coalesce(max(n), 0) FROM (SELECT count(*) AS n "
                                        "FROM reservations GROUP BY node) c")))

    def one(i):
        try:
            s = cpuos.Sandbox.create(template="base", api_key=key, api_url=apis[i % 2].url)
            with lock:
                made.append(s)
                results.append("ok")
        except cpuos.CpuosError as e:
            with lock:
                results.append(type(e).__name__ + ": " + str(e))

    watcher = threading.Thread(target=watch)
    watcher.start()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done.set()
    watcher.join()
    try:
        assert results.count("ok") == 3, results
        assert busiest and max(busiest) == 1, busiest
        assert all("already runs or starts 3 sandboxes" in r for r in results if r != "ok"), results
        assert pg.query("SELECT count(*) FROM reservations") == "0"  # each dropped once answered
        assert pg.query("SELECT count(*) FROM sandboxes WHERE state = 'running'") == "3"
    finally:
        for s in made:
            s.kill()


def test_a_replica_killed_mid_request_leaves_the_other_serving(cluster, pg):
    make_node, make_api = cluster
    a = make_node("node-a")
    key = a.create_key("replica")
    one, two = make_api(), make_api()
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=one.url)
    p = sbx.exec("for i in $(seq 1 20); do echo $i; sleep 0.2; done", background=True)
    seen = []
    with pytest.raises(Exception):  # the stream breaks with its replica
        for kind, text in p.stream():
            seen.append(text)
            if len(seen) == 1:
                one.proc.kill()
    one.proc.wait()
    assert seen, "no output came before the replica was killed"
    # What went through the dead replica is whole on the node: the command runs to its end,
    # and the other replica reaches the sandbox and the account.
    s2 = cpuos.Sandbox.connect(sbx.id, api_key=key, api_url=two.url)
    r = s2.process(p.pid).wait(timeout="60s")
    assert r.exit_code == 0 and r.stdout.split() == [str(i) for i in range(1, 21)], r
    assert sh(s2, "echo still") == "still"
    new = cpuos.Sandbox.create(template="base", api_key=key, api_url=two.url)
    assert {x.id for x in cpuos.Sandbox.list(api_key=key, api_url=two.url)} == {sbx.id, new.id}
    assert pg.query("SELECT count(*) FROM reservations") == "0"
    for x in (s2, new):  # sbx's client knows only the dead replica
        x.kill()


def test_a_paused_sandbox_of_a_node_lost_resumes_through_the_same_url(cluster, pg, objstore):
    make_node, make_api = cluster
    s3 = ("--s3-endpoint", objstore.endpoint, "--s3-bucket", BUCKET)
    env = {k: objstore.env[k] for k in ("CPUOS_S3_ACCESS_KEY", "CPUOS_S3_SECRET_KEY")}
    a = make_node("node-a", *s3, env=env)
    key = a.create_key("moved")
    api = make_api()
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
    assert sbx.info().node == "node-a"  # the only node yet
    b = make_node("node-b", *s3, env=env)
    sh(sbx, "echo kept > /work/k")
    sbx.pause()
    wait_for("the pause stored",
             lambda: a.http("GET", f"/v1/sandboxes/{sbx.id}", key=key).json()["stored"], 120)
    a.stop(signal.SIGKILL)
    wait_for("node-a declared down",
             lambda: pg.query("SELECT state FROM nodes WHERE name = 'node-a'") == "down", LEASE + 10)
    s2 = cpuos.Sandbox.connect(sbx.id, api_key=key, api_url=api.url)  # resumes it
    assert sh(s2, "cat /work/k") == "kept"
    assert s2.info().node == "node-b"
    assert "taken over from node node-a" in b.log_tail(100)
    # node-a back and ready: a replica that still routed the sandbox there would get 421
    # from it; PostgreSQL told the replica that it moved.
    a.start(env={**pg.env, **env})
    wait_for("node-a ready", lambda: api.health()["nodes"] == 2, 10)
    for _ in range(3):
        assert sh(s2, "echo here") == "here"
    s2.kill()


def test_a_paused_sandbox_not_stored_waits_for_its_lost_node(cluster, pg, objstore):
    make_node, make_api = cluster
    s3 = ("--s3-endpoint", objstore.endpoint, "--s3-bucket", BUCKET)
    env = {k: objstore.env[k] for k in ("CPUOS_S3_ACCESS_KEY", "CPUOS_S3_SECRET_KEY")}
    a = make_node("node-a", *s3, env=env)
    key = a.create_key("waits")
    api = make_api()
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
    make_node("node-b", *s3, env=env)
    sh(sbx, "echo kept > /work/k")
    objstore.proxy_kill()
    try:
        sbx.pause()  # local: its upload fails
        a.stop(signal.SIGKILL)
    finally:
        objstore.proxy_start()
    wait_for("node-a declared down",
             lambda: pg.query("SELECT state FROM nodes WHERE name = 'node-a'") == "down", LEASE + 10)
    st, body = api_call(api, "POST", f"/v1/sandboxes/{sbx.id}/resume", key)
    assert st == 503 and b"resumes once that node is back" in body, (st, body)
    a.start(env={**pg.env, **env})
    s2 = cpuos.Sandbox.connect(sbx.id, api_key=key, api_url=api.url)  # its own node again
    assert sh(s2, "cat /work/k") == "kept" and s2.info().node == "node-a"
    s2.kill()


def test_a_drain_moves_sandboxes_to_the_other_nodes(cluster, pg, objstore):
    make_node, make_api = cluster
    s3 = ("--s3-endpoint", objstore.endpoint, "--s3-bucket", BUCKET)
    env = {k: objstore.env[k] for k in ("CPUOS_S3_ACCESS_KEY", "CPUOS_S3_SECRET_KEY")}
    a = make_node("node-a", *s3, env=env)
    key = a.create_key("drain")
    api = make_api()
    run = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
    rest = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
    b = make_node("node-b", *s3, env=env)
    sh(run, "echo ran > /work/f")
    run.exec("sleep 6061", background=True)
    alive = "cat /proc/[0-9]*/cmdline 2>/dev/null | tr '\\0' ' ' | grep -c 'sleep 606[1]'"
    assert sh(run, alive) == "1"
    sh(rest, "echo rested > /work/f")
    rest.pause()
    # asked of node-b's administrator: node-b calls node-a, which moves its own
    r = b.http("POST", "/v1/nodes/node-a/drain", body={"move": True}, unix=True, timeout=600)
    assert r.status == 200, r
    got = r.json()
    assert got["drained"] and got["name"] == "node-a", got
    moved = {m["id"]: m for m in got["moved"]}
    assert moved[run.id] == {"id": run.id, "node": "node-b", "resumed": True}, got
    assert moved[rest.id] == {"id": rest.id, "node": "node-b", "resumed": False}, got
    # the running one runs on node-b, its files and processes with it
    assert run.info().node == "node-b" and run.info().state == "running"
    assert sh(run, "cat /work/f") == "ran"
    assert sh(run, alive) == "1"
    # the paused one is node-b's, paused, until asked for
    info = rest.info()
    assert info.node == "node-b" and info.state == "paused", info
    assert sh(rest, "cat /work/f") == "rested"
    assert "let go of" in a.log_tail(200) and "taken over" in b.log_tail(200)
    # a drained node takes nothing new; and has nothing left
    assert pg.query(f"SELECT count(*) FROM sandboxes WHERE node = 'node-a' "
                    f"AND state IN ('running', 'paused')") == "0"
    new = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
    assert new.info().node == "node-b"
    for x in (run, rest, new):
        x.kill()


def test_template_snapshots_are_shared_through_the_object_store(cluster, pg, objstore):
    make_node, make_api = cluster
    s3 = ("--s3-endpoint", objstore.endpoint, "--s3-bucket", BUCKET)
    env = {k: objstore.env[k] for k in ("CPUOS_S3_ACCESS_KEY", "CPUOS_S3_SECRET_KEY")}
    a = make_node("node-a", *s3, env=env)
    mine = "SELECT key || ' ' || node FROM template_snaps WHERE key LIKE 'base-1c-512m-%'"
    wait_for("node-a's base snapshot in the object store", lambda: pg.query(mine) != "", 180)
    key, by = pg.query(mine).split()
    assert by == "node-a", by
    a.stop()
    # node-b has never made it: its cache lacks that snapshot (the suite's cache is shared, so
    # it is taken away here), and it fetches node-a's instead of booting and warming its own
    local = os.path.join("/var/cache/cpuos/snapshots", key.rsplit("-", 1)[0])
    assert os.path.isdir(local), local
    subprocess.run(["rm", "-rf", local], check=True)
    b = make_node("node-b", *s3, env=env)
    wait_for("node-b fetched it", lambda: os.path.isfile(os.path.join(local, "manifest.json")), 120)
    log = b.log_tail(400)
    assert f"template snapshot {key} fetched from the object store (stored by node node-a)" in log
    assert "building the base template snapshot" not in log
    key_b = b.create_key("fetched")
    r = b.http("POST", "/v1/sandboxes", body={"template": "base"}, key=key_b)
    assert r.status == 201, r
    sid = r.json()["id"]
    r = b.http("POST", f"/v1/sandboxes/{sid}/exec", body={"cmd": "echo restored"}, key=key_b)
    assert r.status == 200 and r.json()["stdout"] == "restored\n", r
    b.http("DELETE", f"/v1/sandboxes/{sid}", key=key_b)
    # stored once: node-b does not store what it fetched
    assert pg.query("SELECT count(*) FROM template_snaps WHERE key LIKE 'base-1c-512m-%'") == "1"


def test_port_urls_and_websockets_through_the_replica(cluster):
    make_node, make_api = cluster
    front = free_port()
    a = make_node("node-a", "--url-public", f"127.0.0.1:{front}")
    key = a.create_key("ports")
    api = make_api("--url-listen", f"127.0.0.1:{front}")
    sbx = cpuos.Sandbox.create(template="node", api_key=key, api_url=api.url)
    try:
        start_server(sbx)
        url = bare(sbx.url(PORT))
        u = urllib.parse.urlsplit(url)
        assert u.port == front, url  # the replica's, not the node's
        token = {"cpuos-traffic-token": sbx.traffic_token}
        status, _, body = request(url + "headers", headers=token)
        assert status == 200 and json.loads(body)["url"] == "/headers", body
        status, _, body = request(url + "upload", method="POST", headers=token, body=b"x" * 300000)
        assert (status, body) == (200, b"got 300000 bytes")
        assert request(url, headers={})[0] == 401  # the node's proxy checks the token
        s, head = ws_connect(u.hostname, u.port, u.path + "ws", token)
        try:
            assert head.startswith("HTTP/1.1 101"), head
            for text in ("hello", "again on the same connection"):
                ws_send(s, text)
                assert ws_recv(s) == "echo: " + text
        finally:
            s.close()
        status, _, body = request(f"http://127.0.0.1:{front}/sbx_0123456789abcdef/{PORT}/")
        assert status == 404 and b"no such sandbox" in body, body
    finally:
        sbx.kill()


def test_postgresql_restarted_mid_traffic(cluster, pg):
    make_node, make_api = cluster
    # a lease longer than the restart: the node must not fence itself meanwhile
    a = make_node("node-a", "--node-lease", str(20 * SLOW))
    key = a.create_key("restart")
    api = make_api()
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
    try:
        outcomes, stop = [], threading.Event()

        def traffic():
            while not stop.is_set():
                try:
                    outcomes.append(("ok", sh(sbx, "echo up")))
                except cpuos.CpuosError as e:
                    outcomes.append(("error", str(e)))
                time.sleep(0.05)

        t = threading.Thread(target=traffic, daemon=True)
        t.start()
        try:
            time.sleep(1)
            pg.restart()
            time.sleep(1)
        finally:
            stop.set()
            t.join(120)
        assert not t.is_alive()
        assert outcomes[0][0] == "ok" and outcomes[-1][0] == "ok", outcomes
        # every request after the restart succeeds: the node's and the replica's connections
        # were made anew, and nothing a failed one began was left half done
        for _ in range(5):
            assert sh(sbx, "echo again") == "again"
        s2 = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
        assert sh(s2, "echo new") == "new"
        s2.kill()
        assert api.health()["nodes"] == 1
        assert pg.query("SELECT state || ' ' || epoch FROM nodes WHERE name = 'node-a'") == "ready 1"
        assert pg.query("SELECT count(*) FROM reservations") == "0"
        errors = [o for o in outcomes if o[0] == "error"]
        print(f"{len(outcomes)} requests, {len(errors)} failed while PostgreSQL restarted: {errors[:3]}")
    finally:
        sbx.kill()


def test_an_upload_resumes_when_the_object_store_is_back(cluster, pg, objstore):
    make_node, make_api = cluster
    s3 = ("--s3-endpoint", objstore.endpoint, "--s3-bucket", BUCKET)
    env = {k: objstore.env[k] for k in ("CPUOS_S3_ACCESS_KEY", "CPUOS_S3_SECRET_KEY")}
    a = make_node("node-a", *s3, env=env)
    key = a.create_key("upload")
    api = make_api()
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=api.url)
    try:
        sh(sbx, "head -c 20000000 /dev/urandom > /work/blob")
        objstore.proxy_kill()
        try:
            sbx.pause()  # local and fast: the upload fails behind it
            time.sleep(2)
            assert not a.http("GET", f"/v1/sandboxes/{sbx.id}", key=key).json()["stored"]
        finally:
            objstore.proxy_start()
        # the next pass of the uploader (every 30 s) takes it up
        wait_for("the pause stored once the store is back",
                 lambda: a.http("GET", f"/v1/sandboxes/{sbx.id}", key=key).json()["stored"], 60)
        assert sh(sbx, "wc -c < /work/blob") == "20000000"
    finally:
        sbx.kill()
