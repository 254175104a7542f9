"""The cpuos CLI against a real cpuosd: what a user types, over the socket and over TCP with a key;
and the pause, resume, fork, checkpoint and usage commands against a fake of the daemon's HTTP
side (what they send, what they print), which needs no VM."""
import hashlib
import json
import os
import subprocess

import pytest

from fake_daemon import FakeDaemon

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPUOS = os.environ.get("CPUOS_CLI_BIN") or os.path.join(ROOT, "build", "bin", "cpuos")


def cpuos(daemon, *args, key=None, stdin=None, timeout=300):
    if not os.path.exists(CPUOS):
        pytest.fail(f"{CPUOS} does not exist: build it first (make all)")
    env = dict(os.environ)
    env.pop("CPUOS_API_KEY", None)
    if key:
        env.update(CPUOS_API_URL=daemon.url, CPUOS_API_KEY=key)
    else:
        env["CPUOS_API_URL"] = "unix://" + daemon.socket
    return subprocess.run([CPUOS, *args], input=stdin, capture_output=True, timeout=timeout, env=env)


@pytest.fixture(scope="module")
def sbx(daemon):
    r = cpuos(daemon, "create", "-T", "base", "--timeout", "30m", "-m", "suite=cli", key=daemon.key_a)
    assert r.returncode == 0, r.stderr
    sid = r.stdout.decode().strip()
    assert sid.startswith("sbx_")
    yield sid
    cpuos(daemon, "kill", sid)


def test_exec_streams_and_passes_the_exit_code(daemon, sbx):
    r = cpuos(daemon, "exec", sbx, "-c", "echo out; echo err >&2; exit 3", key=daemon.key_a)
    assert (r.returncode, r.stdout, r.stderr) == (3, b"out\n", b"err\n")
    r = cpuos(daemon, "exec", sbx, "--", "sh", "-c", "kill -9 $$", key=daemon.key_a)
    assert r.returncode == 137
    r = cpuos(daemon, "exec", "-t", "1s", sbx, "--", "sleep", "30", key=daemon.key_a)
    assert r.returncode == 124


def test_exec_stdin(daemon, sbx):
    data = os.urandom(1 << 20)
    r = cpuos(daemon, "exec", "-i", sbx, "--", "sha256sum", stdin=data, key=daemon.key_a)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0].decode() == hashlib.sha256(data).hexdigest()


def test_code_keeps_state_and_fails_with_the_code(daemon, sbx):
    r = cpuos(daemon, "code", sbx, "-l", "bash", "KEPT=5; cd /tmp", key=daemon.key_a)
    assert (r.returncode, r.stdout, r.stderr) == (0, b"", b""), r
    r = cpuos(daemon, "code", sbx, "-c", "bash", "-", stdin=b"echo $KEPT $(pwd); false", key=daemon.key_a)
    assert (r.returncode, r.stdout) == (1, b"5 /tmp\n") and b"ExitStatus: 1" in r.stderr, r
    r = cpuos(daemon, "code", sbx, "print(1)", key=daemon.key_a)  # no python in the base template
    assert r.returncode == 1 and r.stderr.count(b"\n") == 1 and b"python3" in r.stderr, r


def test_code_prints_values_and_saves_figures(daemon, tmp_path):
    r = cpuos(daemon, "create", "-T", "python", key=daemon.key_a)
    sid = r.stdout.decode().strip()
    try:
        r = cpuos(daemon, "code", sid, "--save", str(tmp_path),
                  "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nprint('drawn')\n6 * 7", key=daemon.key_a)
        assert r.returncode == 0 and r.stdout == b"drawn\n42\n", r
        assert (tmp_path / "figure-1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        r = cpuos(daemon, "code", sid, "--json", "1 / 0", key=daemon.key_a)
        assert r.returncode == 1 and json.loads(r.stdout)["error"]["name"] == "ZeroDivisionError"
    finally:
        cpuos(daemon, "kill", sid)


def test_cp_both_ways(daemon, sbx, tmp_path):
    src, back = tmp_path / "up.bin", tmp_path / "down.bin"
    src.write_bytes(os.urandom(3 << 20))
    r = cpuos(daemon, "cp", str(src), f"{sbx}:/work/up.bin", key=daemon.key_a)
    assert r.returncode == 0, r.stderr
    r = cpuos(daemon, "cp", f"{sbx}:/work/up.bin", str(back), key=daemon.key_a)
    assert r.returncode == 0, r.stderr
    assert back.read_bytes() == src.read_bytes()
    r = cpuos(daemon, "ls", f"{sbx}:/work", key=daemon.key_a)
    assert r.returncode == 0 and b"up.bin" in r.stdout


def test_ls_and_isolation(daemon, sbx):
    r = cpuos(daemon, "ls", key=daemon.key_a)
    assert r.returncode == 0 and sbx.encode() in r.stdout
    r = cpuos(daemon, "ls", key=daemon.key_b)  # another account sees nothing of alice's
    assert r.returncode == 0 and sbx.encode() not in r.stdout
    r = cpuos(daemon, "exec", sbx, "--", "true", key=daemon.key_b)
    assert r.returncode != 0
    assert r.stderr.decode().count("\n") == 1 and "404" in r.stderr.decode()


def test_keys_and_templates_on_the_socket(daemon):
    r = cpuos(daemon, "keys", "create", "--name", "carol")
    assert r.returncode == 0, r.stderr
    key = r.stdout.decode().strip()
    assert key.startswith("cpuos_")
    assert b"carol" in cpuos(daemon, "keys", "ls").stdout
    r = cpuos(daemon, "templates")
    assert r.returncode == 0 and b"python" in r.stdout and b"base" in r.stdout
    r = cpuos(daemon, "ls", key=key)  # the new key works over TCP
    assert r.returncode == 0


def test_errors_are_one_line(daemon):
    r = cpuos(daemon, "kill", "sbx_0000000000000000", key=daemon.key_a)
    assert r.returncode == 1
    assert r.stderr.decode().startswith("cpuos: ") and r.stderr.decode().count("\n") == 1
    r = cpuos(daemon, "ls", key="cpuos_wrong")
    assert r.returncode == 1 and "401" in r.stderr.decode()
    r = cpuos(daemon, "create", "-T", "nosuch", key=daemon.key_a)
    assert r.returncode == 1 and "422" in r.stderr.decode()
    r = cpuos(daemon, "frobnicate")
    assert r.returncode == 2


# The snapshot commands against the fake: the request each sends and what it prints.

SESSION = "ses_00112233445566ff"
CKP = {"id": "ckp_0123456789abcdef", "name": "step-3", "sandbox_id": "sbx_1", "template": "python",
       "vcpus": 1, "memory_mb": 512, "disk_mb": 2048, "size_bytes": 123456789,
       "created_at": "2026-11-29T09:41:58Z"}


def _obj(sid="sbx_1", state="running", **extra):
    return dict({"id": sid, "template": "base", "state": state, "session_id": SESSION,
                 "on_timeout": "pause", "paused_at": None, "parent": None}, **extra)


def _error(h, status, code, message):
    h.send_json(status, {"error": {"code": code, "message": message}})


@pytest.fixture
def fake():
    f = FakeDaemon()
    yield f
    f.close()


def cli(fake, *args, timeout=60):
    if not os.path.exists(CPUOS):
        pytest.fail(f"{CPUOS} does not exist: build it first (make all)")
    env = dict(os.environ, CPUOS_API_URL=fake.url, CPUOS_API_KEY="cpuos_test")
    r = subprocess.run([CPUOS, *args], capture_output=True, timeout=timeout, env=env)
    return r.returncode, r.stdout.decode(), r.stderr.decode()


def test_pause_and_resume_print_the_ids(fake):
    fake.routes[("POST", "/v1/sandboxes/sbx_1/pause")] = lambda h, q, b: h.send_json(
        200, _obj(state="paused"))
    fake.routes[("POST", f"/v1/sandboxes/{SESSION}/resume")] = lambda h, q, b: h.send_json(
        200, _obj())
    assert cli(fake, "pause", "sbx_1") == (0, SESSION + "\n", "")
    assert cli(fake, "resume", SESSION) == (0, "sbx_1\n", "")
    rc, out, _ = cli(fake, "pause", "--json", "sbx_1")
    assert rc == 0 and json.loads(out)["state"] == "paused"
    assert [(m, p) for m, p, _ in fake.requests] == [
        ("POST", "/v1/sandboxes/sbx_1/pause"), ("POST", f"/v1/sandboxes/{SESSION}/resume"),
        ("POST", "/v1/sandboxes/sbx_1/pause")]
    assert all(b == b"" for _, _, b in fake.requests)  # no body


def test_pause_errors_are_one_line(fake):
    fake.routes[("POST", "/v1/sandboxes/sbx_1/pause")] = lambda h, q, b: _error(
        h, 409, "conflict", "sandbox sbx_1 is stopped")
    fake.routes[("POST", "/v1/sandboxes/sbx_2/pause")] = lambda h, q, b: h.send_json(
        200, _obj("sbx_2", state="paused", session_id=None))
    rc, out, err = cli(fake, "pause", "sbx_1")
    assert (rc, out) == (1, "") and err.startswith("cpuos: ") and err.count("\n") == 1
    assert "409" in err and "stopped" in err
    rc, out, err = cli(fake, "pause", "sbx_2")
    assert (rc, out) == (1, "") and "no session_id" in err
    assert cli(fake, "pause")[0] == 2
    assert cli(fake, "resume", "a", "b")[0] == 2
    assert cli(fake, "pause", "--help")[0:2] == (0, cli(fake, "help", "pause")[1])


def test_fork_prints_the_new_ids(fake):
    def answer(h, q, b):
        h.send_json(201, {"sandboxes": [_obj(f"sbx_{i + 2}", parent="sbx_1")
                                        for i in range(b["count"])]})

    fake.routes[("POST", "/v1/sandboxes/sbx_1/fork")] = answer
    assert cli(fake, "fork", "sbx_1", "-n", "2") == (0, "sbx_2\nsbx_3\n", "")
    assert cli(fake, "fork", "sbx_1") == (0, "sbx_2\n", "")
    assert cli(fake, "fork", "--count", "3", "sbx_1")[1].split() == ["sbx_2", "sbx_3", "sbx_4"]
    assert fake.bodies("POST", "/v1/sandboxes/sbx_1/fork") == [{"count": 2}, {"count": 1},
                                                               {"count": 3}]
    rc, _, err = cli(fake, "fork", "-n", "two", "sbx_1")
    assert rc == 2 and "invalid count" in err
    assert cli(fake, "fork")[0] == 2 and len(fake.requests) == 3


def test_checkpoint_commands(fake):
    store = {}

    def create(h, q, b):
        if b["name"] in store:
            return _error(h, 409, "conflict", f"checkpoint '{b['name']}' exists")
        store[b["name"]] = dict(CKP, name=b["name"])
        h.send_json(201, store[b["name"]])

    def delete(h, q, b):
        name = h.path.rsplit("/", 1)[1]
        if store.pop(name, None) is None:
            return _error(h, 404, "not_found", f"no checkpoint '{name}'")
        h.send_empty(204)

    fake.routes[("POST", "/v1/sandboxes/sbx_1/checkpoints")] = create
    fake.routes[("GET", "/v1/checkpoints")] = lambda h, q, b: h.send_json(
        200, {"checkpoints": list(store.values())})
    for name in ("step-3", "nosuch"):
        fake.routes[("DELETE", f"/v1/checkpoints/{name}")] = delete

    assert cli(fake, "checkpoint", "sbx_1", "step-3") == (0, CKP["id"] + "\n", "")
    rc, _, err = cli(fake, "checkpoint", "sbx_1", "step-3")
    assert rc == 1 and "409" in err and "exists" in err and err.count("\n") == 1
    assert fake.bodies("POST", "/v1/sandboxes/sbx_1/checkpoints") == [{"name": "step-3"}] * 2
    assert cli(fake, "checkpoint", "sbx_1")[0] == 2

    rc, out, _ = cli(fake, "checkpoints")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 2, out
    assert lines[0].split() == ["ID", "NAME", "SANDBOX", "TEMPLATE", "SIZE", "CREATED"]
    assert lines[1].split() == [CKP["id"], "step-3", "sbx_1", "python", "123", "MB",
                                "2026-11-29T09:41:58Z"]
    rc, out, _ = cli(fake, "checkpoints", "--json")
    assert rc == 0 and json.loads(out)["checkpoints"][0]["id"] == CKP["id"]

    # Goes on past a failure: the bad name does not spare the good one.
    rc, out, err = cli(fake, "checkpoint-rm", "nosuch", "step-3")
    assert (rc, out) == (1, "") and err.count("\n") == 1 and "404" in err
    assert store == {} and [p for m, p, _ in fake.requests if m == "DELETE"] == [
        "/v1/checkpoints/nosuch", "/v1/checkpoints/step-3"]
    assert cli(fake, "checkpoints")[1].splitlines() == [
        "ID  NAME  SANDBOX  TEMPLATE  SIZE  CREATED"]
    assert cli(fake, "checkpoint-rm")[0] == 2


def test_create_from_a_checkpoint(fake):
    fake.routes[("POST", "/v1/sandboxes")] = lambda h, q, b: h.send_json(201, _obj("sbx_9"))
    assert cli(fake, "create", "--checkpoint", "step-3", "--on-timeout", "kill") == (
        0, "sbx_9\n", "")
    assert cli(fake, "create", "--checkpoint", CKP["id"], "-T", "python")[0] == 0
    assert cli(fake, "create", "--on-timeout", "pause")[0] == 0
    assert fake.bodies("POST", "/v1/sandboxes") == [
        {"checkpoint": "step-3", "on_timeout": "kill"},  # the template is the checkpoint's
        {"checkpoint": CKP["id"], "template": "python"},
        {"template": "base", "on_timeout": "pause"}]


def test_usage_command(fake):
    queries = []

    def answer(h, q, b):
        queries.append(q)
        h.send_json(200, {"account": "alice", "from": q.get("from", "2026-10-30T09:00:00Z"),
                          "to": q.get("to", "2026-11-29T09:00:00Z"), "sandboxes": 3,
                          "running_seconds": 12.5, "vcpu_seconds": 12.5, "gib_seconds": 6.25,
                          "paused_gib_seconds": 1.0, "cost_usd": 0.0004,
                          "price": {"usd_per_hour": 0.11, "vcpus": 2, "memory_gib": 4}})

    fake.routes[("GET", "/v1/usage")] = answer
    rc, out, err = cli(fake, "usage", "--from", "2026-11-01T00:00:00Z", "--to",
                       "2026-11-29T00:00:00+01:00", "--key-id", "key_01")
    assert (rc, err) == (0, "")
    assert queries == [{"from": "2026-11-01T00:00:00Z", "to": "2026-11-29T00:00:00+01:00",
                        "key": "key_01"}]  # "+" arrives as "+", not as a space
    fields = dict(line.split("  ", 1) for line in out.splitlines())
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    assert fields["account"] == "alice" and fields["sandboxes"] == "3"
    assert fields["from"] == "2026-11-01T00:00:00Z" and fields["running seconds"] == "12.5"
    assert fields["paused GiB seconds"] == "1"
    assert fields["cost"] == "$0.0004 (at $0.11 per hour for 2 vCPUs and 4 GiB)"
    rc, out, _ = cli(fake, "usage", "--json")
    assert rc == 0 and json.loads(out)["cost_usd"] == 0.0004 and queries[-1] == {}
    fake.routes[("GET", "/v1/usage")] = lambda h, q, b: _error(h, 400, "bad_request", "bad from")
    rc, _, err = cli(fake, "usage", "--from", "yesterday")
    assert rc == 1 and "bad from" in err and err.count("\n") == 1
    assert cli(fake, "usage", "extra")[0] == 2
