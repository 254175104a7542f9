"""Crash safety, one durable step at a time: a cpuosd started with CPUOS_CRASH_AT=NAME dies by
SIGKILL at that step (src/common/crash.c), and the next cpuosd on the same state must find what the
step promises (docs/architecture.md, "Snapshots"): a QEMU to take over or a whole pause, never half
of one, and nothing left behind that nothing names. Every crash point of the tree is hit here; a
point that is not reached fails its test."""

import os
import re
import signal
import subprocess
import time

import pytest

import cpuos
from conftest import SLOW, started_daemon

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def d():
    yield from started_daemon(key="crash")


def sh(d, sbx_id, cmd):
    r = cpuos.Sandbox.connect(sbx_id, api_key=d.key_a, api_url=d.url).exec(cmd, timeout="60s")
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout.strip()


def new_sandbox(d):
    sbx = cpuos.Sandbox.create(template="base", api_key=d.key_a, api_url=d.url, timeout="10m")
    sh(d, sbx.id, "echo kept > /work/k")
    return sbx.id


def state(d, sbx_id):
    r = d.http("GET", f"/v1/sandboxes/{sbx_id}", key=d.key_a)
    assert r.status == 200, r
    return r.json()["state"]


def qemus(d, under="vms", name=r"sbx_[0-9a-f]+"):
    """{name: pid} of every QEMU whose run directory is d's state_dir/under/name."""
    pattern = re.compile(re.escape(os.path.join(d.state_dir, under)) + f"/({name})/qmp.sock")
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        m = pattern.search(cmd)
        if "qemu-system" in cmd and m:
            found[m.group(1)] = int(pid)
    return found


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


def crash_at(d, point, method, path, body=None, env=None):
    """Restarts d to die at point (with env besides), sends the request that gets there (its
    answer is lost with the daemon), checks that the daemon died at that point, then starts it
    again, clean."""
    d.restart(kill=False, env={"CPUOS_CRASH_AT": point, **(env or {})})
    try:
        d.http(method, path, body=body, key=d.key_a, timeout=120 * SLOW)
    except OSError:
        pass  # the daemon died under it: what matters is what is left
    try:
        rc = d.proc.wait(60 * SLOW)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{point}: the daemon did not reach it:\n{d.log_tail(30)}")
    assert rc == -signal.SIGKILL, (point, rc, d.log_tail(20))
    assert f"crash point {point}" in d.log_tail(60), d.log_tail(20)
    d.start()


def test_create_before_store(d):
    """Its VM runs but no row names it: the next daemon kills it and removes its files."""
    before = qemus(d)
    crash_at(d, "create.before_store", "POST", "/v1/sandboxes", {"template": "base"})
    left = {k: v for k, v in qemus(d).items() if k not in before}
    assert not [pid for pid in left.values() if alive(pid)], left
    r = d.http("GET", "/v1/sandboxes?state=running", key=d.key_a)
    assert not [s for s in r.json()["sandboxes"] if s["id"] not in before]
    leftovers = set(os.listdir(os.path.join(d.state_dir, "vms"))) - set(before)
    assert not leftovers, leftovers


def test_pause_after_manifest(d):
    """Sealed while QEMU still held the stopped VM: the next daemon takes that QEMU over."""
    sid = new_sandbox(d)
    crash_at(d, "pause.after_manifest", "POST", f"/v1/sandboxes/{sid}/pause")
    assert state(d, sid) == "running", d.log_tail(20)
    assert sh(d, sid, "cat /work/k") == "kept"


def test_pause_before_store(d):
    """QEMU gone after a whole pause, the row still running: the next daemon finds it paused."""
    sid = new_sandbox(d)
    crash_at(d, "pause.before_store", "POST", f"/v1/sandboxes/{sid}/pause")
    assert state(d, sid) == "paused", d.log_tail(20)
    assert sid not in qemus(d)
    assert sh(d, sid, "cat /work/k") == "kept"  # resumed by the exec
    assert state(d, sid) == "running"


def test_resume_before_store(d):
    """A restored QEMU runs but the row still says paused: the next daemon pauses it again."""
    sid = new_sandbox(d)
    assert d.http("POST", f"/v1/sandboxes/{sid}/pause", key=d.key_a).status == 200
    crash_at(d, "resume.before_store", "POST", f"/v1/sandboxes/{sid}/resume")
    assert state(d, sid) == "paused", d.log_tail(20)
    assert sid not in qemus(d)
    assert sh(d, sid, "cat /work/k; echo more >> /work/k") == "kept"
    assert sh(d, sid, "cat /work/k") == "kept\nmore"


def test_fork_after_snapshot(d):
    """The fork's snapshot is written and no child made: the next daemon removes it."""
    sid = new_sandbox(d)
    running = set(qemus(d))
    crash_at(d, "fork.after_snapshot", "POST", f"/v1/sandboxes/{sid}/fork", {"count": 1})
    assert not [x for x in os.listdir(os.path.join(d.state_dir, "snapshots"))
                if x.startswith("fork-")]
    assert set(qemus(d)) == running
    assert sh(d, sid, "cat /work/k") == "kept"


def restored_sandbox(d):
    """A sandbox restored from the template snapshot, whose RAM is private (copy-on-write of the
    snapshot's): the daemon builds that snapshot at its first start, and boots until then."""
    deadline = time.monotonic() + 300 * SLOW
    while time.monotonic() < deadline:
        sid = new_sandbox(d)
        if f"{sid} started for 'crash' (base, restored)" in d.log_tail(200):
            return sid
        d.http("DELETE", f"/v1/sandboxes/{sid}", key=d.key_a)
        time.sleep(1)
    pytest.fail("no create restored the template snapshot:\n" + d.log_tail(30))


def test_fork_moving_ram(d):
    """Killed while a VM moves a fork's RAM into a file of its own (two children or more, of a
    parent whose RAM is private and streamed, as a QEMU before 8.2 saves it): that VM runs from
    the fork's directory, which the next daemon removes with it."""
    sid = restored_sandbox(d)
    crash_at(d, "fork.moving_ram", "POST", f"/v1/sandboxes/{sid}/fork", {"count": 2},
             env={"CPUOS_STREAM_PAUSES": "1"})
    assert not qemus(d, "snapshots", r"fork-[0-9a-f]+"), d.log_tail(20)
    assert not [x for x in os.listdir(os.path.join(d.state_dir, "snapshots"))
                if x.startswith("fork-")]
    assert sh(d, sid, "cat /work/k") == "kept"


def test_pause_pages_saved(d):
    """A pause of written pages killed with its pages and device state written, its manifest not:
    the next daemon takes over the stopped QEMU, which goes on, and pauses and resumes it whole."""
    sid = restored_sandbox(d)
    crash_at(d, "pause.pages_saved", "POST", f"/v1/sandboxes/{sid}/pause")
    assert state(d, sid) == "running", d.log_tail(20)
    assert sh(d, sid, "cat /work/k; echo more >> /work/k") == "kept"
    assert d.http("POST", f"/v1/sandboxes/{sid}/pause", key=d.key_a).status == 200
    with open(os.path.join(d.state_dir, "vms", sid, "manifest.json")) as f:
        assert '"ram": "diff"' in f.read()
    assert sh(d, sid, "cat /work/k") == "kept\nmore"


def test_resume_pages_written(d):
    """A resume of written pages killed with the pages in its new QEMU, the device state not
    loaded: that QEMU never runs the guest, the next daemon ends it, and the pause, whole,
    resumes."""
    sid = restored_sandbox(d)
    assert d.http("POST", f"/v1/sandboxes/{sid}/pause", key=d.key_a).status == 200
    crash_at(d, "resume.pages_written", "POST", f"/v1/sandboxes/{sid}/resume")
    assert state(d, sid) == "paused", d.log_tail(20)
    assert sid not in qemus(d), d.log_tail(20)
    assert sh(d, sid, "cat /work/k") == "kept"
    assert state(d, sid) == "running"


def test_checkpoint_before_store(d):
    """A sealed checkpoint with no row: nothing can name it, so the next daemon removes it."""
    sid = new_sandbox(d)
    crash_at(d, "checkpoint.before_store", "POST", f"/v1/sandboxes/{sid}/checkpoints",
             {"name": "lost-one"})
    r = d.http("GET", "/v1/checkpoints", key=d.key_a)
    assert r.status == 200 and not [c for c in r.json()["checkpoints"] if c["name"] == "lost-one"]
    ckdir = os.path.join(d.state_dir, "checkpoints")
    assert not os.path.isdir(ckdir) or not os.listdir(ckdir), os.listdir(ckdir)
    assert sh(d, sid, "cat /work/k") == "kept"


def test_kill_before_store(d):
    """Its QEMU is gone, the row still running: the next daemon finds no QEMU and no whole pause."""
    sid = new_sandbox(d)
    crash_at(d, "kill.before_store", "DELETE", f"/v1/sandboxes/{sid}")
    assert state(d, sid) in ("stopped", "lost")
    assert sid not in qemus(d)


def test_every_crash_point_is_tested():
    """Each crash_point("...") in src/ has a test above."""
    points = set()
    for top, _, files in os.walk(os.path.join(ROOT, "src")):
        for f in files:
            if f.endswith(".c"):
                with open(os.path.join(top, f)) as src:
                    points |= set(re.findall(r'crash_point\("([a-z_.]+)"\)', src.read()))
    with open(__file__) as me:
        tested = set(re.findall(r'crash_at\(d, "([a-z_.]+)"', me.read()))
    assert points and points == tested, (points - tested, tested - points)
