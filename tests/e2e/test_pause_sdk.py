"""Pause, resume, fork, checkpoints and usage against a real cpuosd: through the SDK (a paused
sandbox keeps its files, its memory and its running processes) and through the cpuos CLI.

Boots are slow under TCG (1-3 s each), so each test makes only a few sandboxes."""

import re
import time
import uuid

import pytest

import cpuos
from test_cpuos_cli import cpuos as cli

T = "60s"  # every command's timeout: a daemon that never answers fails the test, not hangs it
SESSION_ID = re.compile(r"^ses_[0-9a-f]{16}$")
SANDBOX_ID = re.compile(r"^sbx_[0-9a-f]{16}$")
CHECKPOINT_ID = re.compile(r"^ckp_[0-9a-f]{16}$")

# A background process that counts, in memory, and writes each value to /tmp/c (atomically, so a
# read never sees half a number). A process that was restarted would count from 1 again.
COUNTER = """
import os, time
n = 0
while True:
    n += 1
    with open("/tmp/c.tmp", "w") as f:
        f.write(str(n))
    os.replace("/tmp/c.tmp", "/tmp/c")
    time.sleep(0.05)
"""


def counter(sbx, above=0, within=30.0):
    """The counter's value once it is above `above` (fails after `within` seconds)."""
    deadline = time.monotonic() + within
    value = 0
    while time.monotonic() < deadline:
        if sbx.files.exists("/tmp/c"):
            value = int(sbx.files.read_text("/tmp/c") or 0)
            if value > above:
                return value
        time.sleep(0.2)
    pytest.fail(f"the counter in {sbx.id} stayed at {value}, not above {above}")


def wait_state(sbx, state, within=60.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if sbx.info().state == state:
            return
        time.sleep(0.5)
    pytest.fail(f"{sbx.id} is {sbx.state}, not {state}, after {within}s")


def kill_quietly(*sandboxes):
    for s in sandboxes:
        try:
            s.kill()
        except cpuos.CpuosError:
            pass


def test_pause_keeps_files_memory_and_processes(make_sandbox):
    sbx = make_sandbox(template="python")
    sbx.files.write("/work/note.txt", "written before the pause\n")
    proc = sbx.exec(["python3", "-c", COUNTER], background=True)
    before = counter(sbx, above=5)

    session = sbx.pause()
    assert SESSION_ID.match(session), session
    assert (sbx.state, sbx.session_id) == ("paused", session)
    assert sbx.paused_at is not None
    assert sbx.pause() == session  # pausing a paused sandbox answers the same
    # Reading the sandbox's fields does not resume it.
    assert cpuos.Sandbox.connect(sbx.id).state == "paused"
    assert sbx.id in {s.id for s in cpuos.Sandbox.list(state="paused")}

    # What a program that kept only the session id does, the next time the user writes.
    resumed = cpuos.Sandbox.resume(session)
    assert (resumed.id, resumed.state, resumed.paused_at) == (sbx.id, "running", None)
    assert resumed.files.read_text("/work/note.txt") == "written before the pause\n"
    procs = {p.pid: p for p in resumed.processes()}
    assert proc.pid in procs and procs[proc.pid].state == "running", procs
    # The same process, its memory kept: it counts on from where it was, not from 1.
    first = counter(resumed)
    assert first >= before, (before, first)
    assert counter(resumed, above=first + 5) > first
    assert resumed.resume().state == "running"  # resuming a running one is fine
    proc.kill()


def test_a_call_on_a_paused_sandbox_resumes_it(make_sandbox):
    sbx = make_sandbox(template="base")
    sbx.exec("echo kept > /work/f", timeout=T)
    sbx.pause()
    assert sbx.info().state == "paused"
    r = sbx.exec("cat /work/f", timeout=T)  # no resume first: the daemon resumes it
    assert (r.exit_code, r.stdout) == (0, "kept\n")
    assert sbx.info().state == "running"
    # Resuming by the sandbox id works as well as by the session id.
    sbx.pause()
    assert cpuos.Sandbox.resume(sbx.id).state == "running"


def test_pause_and_resume_across_accounts_and_states(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    session = sbx.pause()
    # Another account's session is unknown, exactly like one that never existed.
    with pytest.raises(cpuos.NotFoundError):
        cpuos.Sandbox.resume(session, api_key=daemon.key_b)
    with pytest.raises(cpuos.NotFoundError):
        cpuos.Sandbox.resume("ses_0000000000000000")
    assert cpuos.Sandbox.resume(session).state == "running"
    sbx.kill()
    with pytest.raises(cpuos.ConflictError):
        sbx.pause()


def test_timeout_pauses_by_default_or_kills(make_sandbox):
    paused = make_sandbox(template="base", timeout="3s")
    killed = make_sandbox(template="base", timeout="3s", on_timeout="kill")
    assert (paused.on_timeout, killed.on_timeout) == ("pause", "kill")
    wait_state(paused, "paused")
    wait_state(killed, "stopped")
    assert killed.end_reason == "timeout"
    assert paused.exec("echo back", timeout=T).stdout == "back\n"


def test_fork_copies_a_running_sandbox(make_sandbox):
    sbx = make_sandbox(template="base")
    sbx.exec("echo parent > /work/f", timeout=T)
    forks = sbx.fork(2)
    try:
        assert len(forks) == 2 and len({f.id for f in forks} | {sbx.id}) == 3
        for f in forks:
            assert SANDBOX_ID.match(f.id) and (f.state, f.parent) == ("running", sbx.id)
            assert f.exec("cat /work/f", timeout=T).stdout == "parent\n"
        forks[0].exec("echo child > /work/f", timeout=T)
        assert sbx.exec("cat /work/f", timeout=T).stdout == "parent\n"  # copies, not shared
        assert forks[1].exec("cat /work/f", timeout=T).stdout == "parent\n"
        assert sbx.info().state == "running"
    finally:
        kill_quietly(*forks)
    with pytest.raises(cpuos.BadRequestError):
        sbx.fork(17)


def test_checkpoint_and_create_from_it(daemon, make_sandbox):
    name = f"step-{uuid.uuid4().hex[:8]}"
    sbx = make_sandbox(template="python")
    sbx.files.write("/work/state.txt", "at the checkpoint\n")
    ckp = sbx.checkpoint(name)
    assert CHECKPOINT_ID.match(ckp.id), ckp
    assert (ckp.name, ckp.sandbox_id, ckp.template) == (name, sbx.id, "python")
    assert ckp.size_bytes and ckp.size_bytes > 0 and ckp.created_at
    with pytest.raises(cpuos.ConflictError):
        sbx.checkpoint(name)  # the name is taken
    assert sbx.info().state == "running"  # the sandbox goes on

    assert [c.id for c in cpuos.Checkpoint.list()][0] == ckp.id  # newest first
    assert cpuos.Checkpoint.get(name).id == ckp.id == cpuos.Checkpoint.get(ckp.id).id
    with pytest.raises(cpuos.NotFoundError):  # another account's
        cpuos.Checkpoint.get(name, api_key=daemon.key_b)

    sbx.files.write("/work/state.txt", "after the checkpoint\n")
    # From the checkpoint object, the template taken from it.
    child = make_sandbox(template=None, checkpoint=ckp)
    assert (child.template, child.parent) == ("python", ckp.id)
    assert child.files.read_text("/work/state.txt") == "at the checkpoint\n"

    ckp.delete()
    with pytest.raises(cpuos.NotFoundError):
        cpuos.Checkpoint.get(name)
    assert child.exec("true", timeout=T).exit_code == 0  # a sandbox outlives its checkpoint
    with pytest.raises(cpuos.NotFoundError):
        make_sandbox(template=None, checkpoint=name)


def test_usage(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    sbx.exec("sleep 1", timeout=T)
    u = cpuos.usage()
    assert isinstance(u, cpuos.Usage) and u.account == "alice"
    assert u.sandboxes >= 1 and u.running_seconds > 0 and u.vcpu_seconds > 0
    assert u.gib_seconds > 0 and u.cost_usd >= 0 and u.price.usd_per_hour > 0
    assert u.from_ and u.to
    empty = cpuos.usage(from_="2000-01-01T00:00:00Z", to="2000-01-02T00:00:00Z")
    assert (empty.sandboxes, empty.running_seconds, empty.cost_usd) == (0, 0, 0)
    assert cpuos.usage(api_key=daemon.key_b).account == "bob"
    with pytest.raises(cpuos.BadRequestError):
        cpuos.usage(from_="yesterday")


# The CLI, as a user types it (over TCP with alice's key).

def _ok(r):
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


def test_cli_pause_resume_fork(daemon):
    key = daemon.key_a
    made = []
    try:
        sid = _ok(cli(daemon, "create", "-T", "base", "--timeout", "10m", key=key)).strip()
        made.append(sid)
        _ok(cli(daemon, "exec", sid, "-c", "echo hi > /work/f", key=key))

        out = _ok(cli(daemon, "pause", sid, key=key))
        assert out.count("\n") == 1 and SESSION_ID.match(out.strip()), out
        session = out.strip()
        assert sid in _ok(cli(daemon, "ls", "--state", "paused", key=key))
        assert _ok(cli(daemon, "resume", session, key=key)) == sid + "\n"
        assert _ok(cli(daemon, "resume", sid, key=key)) == sid + "\n"  # running: fine

        out = _ok(cli(daemon, "fork", sid, "-n", "2", key=key))
        forks = out.split()
        made += forks
        assert len(forks) == 2 and out == "".join(f + "\n" for f in forks)
        assert all(SANDBOX_ID.match(f) for f in forks) and sid not in forks
        for f in forks:
            assert _ok(cli(daemon, "exec", f, "--", "cat", "/work/f", key=key)) == "hi\n"

        r = cli(daemon, "pause", "sbx_0000000000000000", key=key)
        assert r.returncode == 1 and "404" in r.stderr.decode()
        assert r.stderr.decode().count("\n") == 1
    finally:
        for s in made:
            cli(daemon, "kill", s, key=key)


def test_cli_checkpoints_and_usage(daemon):
    key = daemon.key_a
    name = f"cli-{uuid.uuid4().hex[:8]}"
    made = []
    try:
        sid = _ok(cli(daemon, "create", "-T", "base", "--timeout", "10m", key=key)).strip()
        made.append(sid)
        _ok(cli(daemon, "exec", sid, "-c", "echo saved > /work/f", key=key))

        out = _ok(cli(daemon, "checkpoint", sid, name, key=key))
        ckp = out.strip()
        assert out.count("\n") == 1 and CHECKPOINT_ID.match(ckp), out
        r = cli(daemon, "checkpoint", sid, name, key=key)
        assert r.returncode == 1 and "409" in r.stderr.decode()

        table = _ok(cli(daemon, "checkpoints", key=key)).splitlines()
        assert table[0].split()[:4] == ["ID", "NAME", "SANDBOX", "TEMPLATE"]
        row = next(line.split() for line in table[1:] if line.startswith(ckp))
        assert row[1:4] == [name, sid, "base"], table
        assert ckp not in _ok(cli(daemon, "checkpoints", key=daemon.key_b))  # bob sees none

        child = _ok(cli(daemon, "create", "--checkpoint", name, "--timeout", "5m",
                        key=key)).strip()
        made.append(child)
        assert SANDBOX_ID.match(child) and child != sid
        assert _ok(cli(daemon, "exec", child, "--", "cat", "/work/f", key=key)) == "saved\n"

        _ok(cli(daemon, "checkpoint-rm", name, key=key))
        assert ckp not in _ok(cli(daemon, "checkpoints", key=key))
        r = cli(daemon, "checkpoint-rm", ckp, key=key)
        assert r.returncode == 1 and "404" in r.stderr.decode()
        assert r.stderr.decode().count("\n") == 1

        lines = _ok(cli(daemon, "usage", key=key)).splitlines()
        fields = {ln.split("  ", 1)[0]: ln.split("  ", 1)[1].strip() for ln in lines}
        assert fields["account"] == "alice" and int(fields["sandboxes"]) >= 2
        assert fields["cost"].startswith("$")
        out = _ok(cli(daemon, "usage", "--from", "2000-01-01T00:00:00Z", "--to",
                      "2000-01-02T00:00:00Z", key=key))
        assert re.search(r"^sandboxes +0$", out, re.M), out
    finally:
        for s in made:
            cli(daemon, "kill", s, key=key)
