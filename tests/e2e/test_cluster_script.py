"""A local cluster in one command (scripts/cluster.sh: PostgreSQL, the object store, two nodes, two
cpuos-api replicas, HAProxy in front): seed 003's program and the AI SDK provider's suite run
unchanged against its one URL; a paused sandbox whose node is then lost (stop-node: its daemon and
QEMUs killed) resumes through the same URL on the other node with its files and live processes."""

import os
import runpy
import socket
import subprocess
import tempfile
import time
from types import SimpleNamespace

import pytest

import cpuos
from conftest import DAEMON_BIN, ROOT, SLOW
from fake_openai import FakeOpenAI, grew_most, sales_csv
from test_sdk_seed003 import SEED_003_PROGRAM
from test_typescript import AISDK, run_suite

SCRIPT = str(ROOT / "scripts" / "cluster.sh")
LEASE = 3 * SLOW


def port_block(n=100):
    """A base port whose next n ports are free now."""
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
    pytest.fail("no block of free ports", pytrace=False)


def unix_json(sock, method, path, body=None):
    args = ["curl", "-sf", "--unix-socket", sock, "-X", method, f"http://x{path}"]
    if body is not None:
        args += ["-d", body]
    out = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out
    import json
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def cluster():
    d = tempfile.mkdtemp(prefix="cpuos-cluster-", dir="/tmp")
    env = {**os.environ, "CPUOS_CLUSTER_PORT": str(port_block()), "CPUOS_CLUSTER_LEASE": str(LEASE),
           "CPUOS_BIN_DIR": os.path.dirname(str(DAEMON_BIN))}
    out = subprocess.run([SCRIPT, "up", d, "2"], capture_output=True, text=True, timeout=600, env=env)
    try:
        assert out.returncode == 0, out.stderr[-3000:]
        exports = dict(line[7:].split("=", 1) for line in out.stdout.splitlines()
                       if line.startswith("export "))
        key_b = unix_json(os.path.join(d, "node-1", "run", "cpuosd.sock"), "POST", "/v1/keys",
                          '{"name":"bob"}')["key"]

        def log_tail(n=30):
            tails = []
            for name in ("api-1.log", "api-2.log", "node-1/cpuosd.log", "node-2/cpuosd.log"):
                try:
                    with open(os.path.join(d, name), "rb") as f:
                        tails.append(f"--- {name}\n" + "\n".join(
                            f.read().decode("utf-8", "replace").splitlines()[-n:]))
                except OSError:
                    pass
            return "\n".join(tails)

        yield SimpleNamespace(dir=d, env=env, url=exports["CPUOS_API_URL"],
                              key_a=exports["CPUOS_API_KEY"], key_b=key_b, log_tail=log_tail)
    finally:
        subprocess.run([SCRIPT, "down", d], capture_output=True, timeout=300, env=env)
        subprocess.run(["rm", "-rf", d])


def test_seed003_through_the_cluster(cluster, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CPUOS_API_URL", cluster.url)
    monkeypatch.setenv("CPUOS_API_KEY", cluster.key_a)
    data = sales_csv()
    (tmp_path / "sales.csv").write_bytes(data)
    program = tmp_path / "seed003.py"
    with FakeOpenAI() as fake:
        program.write_text(SEED_003_PROGRAM.replace("https://gpuos.si/v1", fake.base_url))
        monkeypatch.setenv("GPUOS_API_KEY", "gpuos-test-key")
        monkeypatch.chdir(tmp_path)
        ns = runpy.run_path(str(program), run_name="__main__")
    answer = capsys.readouterr().out
    assert grew_most(data) in answer, answer + cluster.log_tail()
    resumed = cpuos.Sandbox.resume(ns["session"])
    assert resumed.files.read("/work/sales.csv") == data
    assert resumed.info().node in ("node-1", "node-2")
    resumed.kill()


def test_ai_sdk_provider_suite_through_the_cluster(cluster):
    run_suite(cluster, AISDK, "test/provider.test.mjs")


def test_a_paused_sandbox_moves_when_its_node_is_lost(cluster):
    kw = dict(api_key=cluster.key_a, api_url=cluster.url)
    sbx = cpuos.Sandbox.create(template="base", **kw)
    sbx.exec("echo kept > /work/k && nohup sh -c 'n=0; while :; do n=$((n+1)); echo $n > /work/t && "
             "mv /work/t /work/tick; sleep 0.2; done' >/dev/null 2>&1 & echo $! > /work/pid; "
             "until [ -s /work/tick ]; do sleep 0.05; done")  # it ticked before the pause
    sbx.pause()
    deadline = time.monotonic() + 120 * SLOW
    while not sbx.client.request("GET", f"/v1/sandboxes/{sbx.id}")["stored"]:
        assert time.monotonic() < deadline, "the pause was not stored"
        time.sleep(0.3)
    owner = sbx.info().node
    out = subprocess.run([SCRIPT, "stop-node", cluster.dir, owner], capture_output=True, text=True,
                         timeout=60, env=cluster.env)
    assert out.returncode == 0, out.stderr
    time.sleep(LEASE)  # declared down once its lease has run out
    s2 = cpuos.Sandbox.connect(sbx.id, **kw)
    deadline = time.monotonic() + 30 * SLOW
    while True:
        try:
            kept = s2.exec("cat /work/k").stdout.strip()  # resumes it, on the other node
            break
        except cpuos.CpuosError:  # its node not yet declared down
            assert time.monotonic() < deadline, cluster.log_tail()
            time.sleep(1)
    assert kept == "kept"
    assert s2.info().node == ({"node-1", "node-2"} - {owner}).pop()
    pid = s2.exec("cat /work/pid").stdout.strip()
    t = int(s2.exec("cat /work/tick").stdout)
    time.sleep(1)
    assert s2.exec(f"kill -0 {pid} && echo alive").stdout.strip() == "alive"
    assert int(s2.exec("cat /work/tick").stdout) > t
    s2.kill()
    out = subprocess.run([SCRIPT, "start-node", cluster.dir, owner], capture_output=True, text=True,
                         timeout=300, env=cluster.env)
    assert out.returncode == 0, out.stderr


def test_a_node_cut_off_is_fenced_and_kills_what_it_ran_when_back(cluster):
    """A partition, not a kill: the node's link to the bridge goes down while it runs a sandbox.
    The others declare it down and the sandbox lost; the node, unable to renew, stops by itself
    (its QEMU runs on, cut off); back on the network it joins at a new epoch and kills it."""
    kw = dict(api_key=cluster.key_a, api_url=cluster.url)
    sbx = cpuos.Sandbox.create(template="base", **kw)
    owner = sbx.info().node

    def qemu_runs():
        return subprocess.run(["pgrep", "-f", f"qemu.*{sbx.id}"], capture_output=True).returncode == 0

    def wait(what, cond, limit):
        deadline = time.monotonic() + limit * SLOW
        while True:
            try:
                if cond():
                    return
            except cpuos.CpuosError:  # its node unreachable (502) until declared down
                pass
            assert time.monotonic() < deadline, f"{what}\n{cluster.log_tail()}"
            time.sleep(0.3)

    assert qemu_runs()
    pid_file = os.path.join(cluster.dir, owner, "pid")
    with open(pid_file) as f:
        daemon = int(f.read())
    cut = subprocess.run([SCRIPT, "cut-node", cluster.dir, owner], capture_output=True, text=True,
                         timeout=60, env=cluster.env)
    assert cut.returncode == 0, cut.stderr
    try:
        wait("the sandbox of the node cut off declared lost", lambda: sbx.info().state == "lost",
             LEASE * 4 + 30)
        # it learns when its database connection gives up (cluster.sh sets tcp_user_timeout
        # and connect_timeout to a lease), a renewal then fails, and its lease is past
        wait("the node cut off stopped by itself", lambda: not os.path.exists(f"/proc/{daemon}"),
             LEASE * 4 + 30)
        assert qemu_runs()  # nobody could reach it to stop it
    finally:
        heal = subprocess.run([SCRIPT, "heal-node", cluster.dir, owner], capture_output=True,
                              text=True, timeout=60, env=cluster.env)
        assert heal.returncode == 0, heal.stderr
    back = subprocess.run([SCRIPT, "start-node", cluster.dir, owner], capture_output=True,
                          text=True, timeout=300, env=cluster.env)
    assert back.returncode == 0, back.stderr
    wait("the QEMU of the lost sandbox killed by its node, back", lambda: not qemu_runs(), 60)
    with open(os.path.join(cluster.dir, owner, "cpuosd.log"), "rb") as f:
        log = f.read().decode("utf-8", "replace")
    assert "could not renew its lease" in log or "declared down" in log, log[-2000:]
    assert sbx.info().state == "lost"
