"""Daemons sharing one real PostgreSQL database as nodes (cpuosd --database URL --node NAME): keys and
sandboxes are seen from any node, each sandbox is acted on only by the node that owns it (421
elsewhere); a node killed is declared down once its lease runs out, its running sandboxes lost and
its paused ones kept for it; back, it joins at a new epoch, kills what it ran and resumes what it
paused; a paused sandbox of a node lost resumes on another from the object store, with its files and
live processes; a node stopped past its lease writes nothing more and stops when it wakes; a drained node
takes no new sandboxes, also after a restart (cpuos nodes); a single host's daemon and nodes never
share a database."""

import os
import signal
import subprocess
import time

import pytest

import cpuos
from conftest import ROOT, SLOW, Daemon, PgServer
from test_objstore import BUCKET, ObjStore

CPUOS = os.environ.get("CPUOS_CLI_BIN") or os.path.join(ROOT, "build", "bin", "cpuos")

LEASE = 3 * SLOW  # seconds: short, so the tests wait little for a node to be declared down


@pytest.fixture(scope="module")
def pg():
    s = PgServer()
    yield s
    s.close()


@pytest.fixture
def nodes(pg, monkeypatch):
    monkeypatch.delenv("CPUOS_E2E_PG", raising=False)  # these name their database themselves
    made = []

    def make(name, *extra, env=None):
        d = Daemon(extra_args=["--database", pg.url, "--node", name, "--node-lease", str(LEASE),
                               *extra])
        made.append(d)
        d.start(env={**pg.env, **(env or {})})
        return d

    yield make
    for d in made:
        d.close()
    pg.query("DELETE FROM sandbox_meta; DELETE FROM sandboxes; DELETE FROM usage_events; "
             "DELETE FROM nodes")


def sh(sbx, cmd):
    r = sbx.exec(cmd, timeout="60s")
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout.strip()


def row(d, key, sid):
    r = d.http("GET", f"/v1/sandboxes/{sid}", key=key)
    assert r.status == 200, r
    return r.json()


def wait_for(what, cond, limit):
    deadline = time.monotonic() + limit * SLOW
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    pytest.fail(f"{what} within {limit * SLOW} s")


def alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_nodes_share_the_state_and_each_acts_on_its_own(nodes, pg):
    a, b = nodes("node-a"), nodes("node-b")
    key = a.create_key("shared")  # one database: the key works on every node
    sa = cpuos.Sandbox.create(template="base", api_key=key, api_url=a.url)
    sb = cpuos.Sandbox.create(template="base", api_key=key, api_url=b.url)
    assert row(b, key, sa.id)["node"] == "node-a" and row(a, key, sb.id)["node"] == "node-b"
    assert cpuos.Sandbox.connect(sa.id, api_key=key, api_url=b.url).node == "node-a"
    listed = b.http("GET", "/v1/sandboxes", key=key).json()["sandboxes"]
    assert {s["id"] for s in listed} == {sa.id, sb.id}
    for method, path, body in (("POST", f"/v1/sandboxes/{sa.id}/exec", {"cmd": "true"}),
                               ("POST", f"/v1/sandboxes/{sa.id}/pause", None),
                               ("DELETE", f"/v1/sandboxes/{sa.id}", None)):
        r = b.http(method, path, body=body, key=key)
        assert r.status == 421 and "node 'node-a'" in r.json()["error"]["message"], (path, r)
    assert sh(sa, "echo mine") == "mine" and sh(sb, "echo mine") == "mine"
    assert pg.query("SELECT string_agg(name || ':' || state, ',' ORDER BY name) FROM nodes") == \
        "node-a:ready,node-b:ready"
    # A single host's daemon does not share the nodes' database.
    single = Daemon(extra_args=["--database", pg.url])
    try:
        with pytest.raises(pytest.fail.Exception) as e:
            single.start(env=pg.env)
        assert "exited with 1" in str(e.value)
        assert "another cpuosd uses this database" in single.log_tail(5)
    finally:
        single.close()


def test_a_node_lost_is_declared_down_and_comes_back(nodes, pg):
    a, b = nodes("node-a"), nodes("node-b")
    key = a.create_key("lost")
    running = cpuos.Sandbox.create(template="base", api_key=key, api_url=a.url)
    paused = cpuos.Sandbox.create(template="base", api_key=key, api_url=a.url)
    sh(paused, "echo kept > /work/k")
    paused.pause()
    qemu = int(pg.query(f"SELECT qemu_pid FROM sandboxes WHERE id = '{running.id}'"))
    assert alive(qemu)
    epoch = int(pg.query("SELECT epoch FROM nodes WHERE name = 'node-a'"))

    a.stop(signal.SIGKILL)  # a host lost, as far as the others can tell: its QEMU runs on
    wait_for("node-a declared down",
             lambda: row(b, key, running.id)["state"] == "lost", LEASE + 10)
    got = row(b, key, running.id)
    assert got["end_reason"] == "node_lost" and got["node"] == "node-a"
    assert row(b, key, paused.id)["state"] == "paused"  # its own still, on its disk
    assert pg.query("SELECT state FROM nodes WHERE name = 'node-a'") == "down"
    assert "declared 1 node down" in b.log_tail(50)

    a.start(env=pg.env)  # back: a new epoch, what it ran is gone, what it paused is its own
    assert int(pg.query("SELECT epoch FROM nodes WHERE name = 'node-a'")) == epoch + 2
    wait_for("the lost sandbox's QEMU killed", lambda: not alive(qemu), 30)
    assert sh(cpuos.Sandbox.connect(paused.id, api_key=key, api_url=a.url), "cat /work/k") == "kept"


@pytest.fixture(scope="module")
def objstore():
    s = ObjStore()
    yield s
    s.close()


def test_a_paused_sandbox_of_a_node_lost_resumes_on_another(nodes, pg, objstore, tmp_path):
    s3 = ("--s3-endpoint", objstore.endpoint, "--s3-bucket", BUCKET)
    env = {k: objstore.env[k] for k in ("CPUOS_S3_ACCESS_KEY", "CPUOS_S3_SECRET_KEY")}
    a, b = nodes("node-a", *s3, env=env), nodes("node-b", *s3, env=env)
    key = a.create_key("moved")
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=a.url)
    sh(sbx, "echo kept > /work/k && nohup sh -c 'n=0; while :; do n=$((n+1)); echo $n > /work/t && "
            "mv /work/t /work/tick; sleep 0.2; done' >/dev/null 2>&1 & echo $! > /work/pid; "
            "until [ -s /work/tick ]; do sleep 0.05; done")  # it ticked before the pause
    sbx.pause()
    wait_for("the pause stored", lambda: row(a, key, sbx.id)["stored"], 120)
    # Asked of B while A lives: A's.
    assert b.http("POST", f"/v1/sandboxes/{sbx.id}/resume", key=key).status == 421

    a.stop(signal.SIGKILL)  # A's host is lost, its disk with it as far as B can tell
    wait_for("node-a declared down",
             lambda: pg.query("SELECT state FROM nodes WHERE name = 'node-a'") == "down", LEASE + 10)
    # A node whose snapshots differ (here another egress CA) leaves it: its stored pause says
    # what restores it.
    # (building no template snapshot of its own meanwhile: its CA makes them new to it)
    c = nodes("node-c", *s3, "--egress-ca", str(tmp_path / "ca"), "--template-snapshots", "off",
              env=env)
    r = c.http("POST", f"/v1/sandboxes/{sbx.id}/resume", key=key)
    assert r.status == 421 and "cannot restore" in r.json()["error"]["message"], r
    assert row(c, key, sbx.id)["state"] == "paused"
    s2 = cpuos.Sandbox.connect(sbx.id, api_key=key, api_url=b.url)
    assert sh(s2, "cat /work/k") == "kept"  # resumed on B, from the object store
    assert s2.info().node == "node-b"
    pid = sh(s2, "cat /work/pid")
    t = int(sh(s2, "cat /work/tick"))
    time.sleep(1)
    assert sh(s2, f"kill -0 {pid} && echo alive") == "alive" and int(sh(s2, "cat /work/tick")) > t
    log = b.log_tail(100)
    assert "taken over from node node-a" in log and "fetched from the object store" in log


def test_a_sandbox_no_node_took_is_deleted_past_the_retention(nodes, pg, objstore):
    """A paused sandbox let go of that no node took (a drain's move with no other node there) has no
    node to end it: one past whose retention it is takes it over and deletes it."""
    s3 = ("--s3-endpoint", objstore.endpoint, "--s3-bucket", BUCKET)
    env = {k: objstore.env[k] for k in ("CPUOS_S3_ACCESS_KEY", "CPUOS_S3_SECRET_KEY")}
    a = nodes("node-a", *s3, env=env)
    key = a.create_key("orphan")
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=a.url)
    sbx.pause()
    r = a.http("POST", "/v1/nodes/node-a/drain", body={"move": True}, unix=True, timeout=600)
    assert r.status == 200, r
    (moved,) = r.json()["moved"]
    assert moved["node"] is None and "takes it when it is asked for" in moved["note"], moved
    where = f"FROM sandboxes WHERE id = '{sbx.id}'"
    assert pg.query(f"SELECT state || '|' || node {where}") == "paused|"
    nodes("node-b", *s3, "--paused-retention", "1", env=env)
    wait_for("node-b to delete it", lambda: pg.query(
        f"SELECT state || '|' || end_reason || '|' || node {where}") == "stopped|retention|node-b", 60)


def test_a_node_stopped_past_its_lease_is_fenced(nodes, pg):
    a, b = nodes("node-a"), nodes("node-b")
    key = a.create_key("fenced")
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=a.url)
    qemu = int(pg.query(f"SELECT qemu_pid FROM sandboxes WHERE id = '{sbx.id}'"))
    try:
        os.kill(a.proc.pid, signal.SIGSTOP)  # a partition, or a long pause of its host
        try:
            wait_for("node-a declared down", lambda: row(b, key, sbx.id)["state"] == "lost",
                     LEASE + 10)
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        # Awake, it finds its epoch gone: it writes nothing more and stops for its supervisor.
        assert a.proc.wait(30 * SLOW) == 1
        assert "was declared down" in a.log_tail(20)
        assert row(b, key, sbx.id)["state"] == "lost"
    finally:
        # its QEMU runs on until the node starts again and kills it (the test above of a
        # node that comes back): here nothing starts it again, so the test does
        if qemu > 0 and alive(qemu):
            os.kill(qemu, signal.SIGKILL)


def cpuos_cli(d, *args):
    """The CLI as the administrator, on the node's Unix socket."""
    env = {k: v for k, v in os.environ.items() if k not in ("CPUOS_API_KEY", "CPUOS_API_URL")}
    env["CPUOS_API_URL"] = "unix://" + d.socket
    return subprocess.run([CPUOS, *args], capture_output=True, text=True, timeout=60, env=env)


def test_a_drained_node_takes_no_new_sandboxes(nodes, pg):
    a, b = nodes("node-a"), nodes("node-b")
    key = a.create_key("drain")
    out = cpuos_cli(b, "nodes")
    assert out.returncode == 0 and "node-a" in out.stdout and "node-b" in out.stdout, out
    assert cpuos_cli(b, "nodes", "drain", "node-a").stdout.strip() == "node-a draining"
    r = a.http("POST", "/v1/sandboxes", body={"template": "base"}, key=key)
    assert r.status == 503 and "node 'node-a' is draining" in r.json()["error"]["message"], r
    a.restart(kill=False, env=pg.env)  # a drain outlives a restart
    r = a.http("POST", "/v1/sandboxes", body={"template": "base"}, key=key)
    assert r.status == 503, r
    assert cpuos_cli(a, "nodes", "undrain", "node-a").stdout.strip() == "node-a ready"
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=a.url)
    assert sh(sbx, "echo again") == "again"
    # The administrator's: unknown over TCP, and clear about what it cannot do.
    assert a.http("GET", "/v1/nodes", key=key).status == 404
    bad = cpuos_cli(a, "nodes", "drain", "nowhere")
    assert bad.returncode != 0 and "no node 'nowhere'" in bad.stderr, bad
