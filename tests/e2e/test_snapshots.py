"""Snapshots against a real cpuosd, for what users of hosted sandboxes saw go wrong: memory and
files byte-exact over many pause/resume cycles, resumes in a row with writes between, the timeout
kept across a resume, forks that share no randomness, a right clock after a pause, damaged
snapshots, usage billed to the second, a daemon restart with paused sandboxes, and creates from the
template snapshot and the warm pool, and a pause that names the egress CA its guest trusts. Crashes
at each durable step: test_crash.py."""

import datetime
import hashlib
import json
import os
import re
import stat
import subprocess
import time

import pytest

import cpuos
from conftest import SLOW, Daemon, mapping_kb, mem_backend, qemu_of, restored_from_snapshot

T = os.environ.get("CPUOS_SNAP_T", "60s")
CYCLES = int(os.environ.get("CPUOS_PAUSE_CYCLES", "100"))


def sh(sbx, cmd):
    r = sbx.exec(cmd, timeout=T)
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout.strip()


@pytest.fixture
def own_daemon():
    """A daemon of the test's own, for tests that kill or restart it."""
    made = []

    def make(*args):
        d = Daemon(extra_args=list(args))
        d.start()
        d.key_a = d.create_key("snap")
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


def test_cycles_byte_exact(daemon, make_sandbox):
    """A sandbox restored from the template's snapshot: memory (a tmpfs file) and files checked by
    checksums taken in the guest every cycle, a process that lives through them all, and after
    them its RAM still the template's pages but for what it wrote."""
    sbx = restored_from_snapshot(daemon, lambda: make_sandbox(template="base"))[0]
    mem = sh(sbx, "head -c 8388608 /dev/urandom > /dev/shm/blob && sha256sum < /dev/shm/blob")
    loop = sh(sbx, "nohup sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 & echo $!")
    for i in range(CYCLES):
        sh(sbx, f"echo {i} > /work/f{i % 10}")
        assert sbx.pause().startswith("ses_")
        # every tenth cycle through the session, else through the next call
        if i % 10 == 0:
            sbx = cpuos.Sandbox.resume(sbx.session_id)
        got = sh(sbx, f"sha256sum < /dev/shm/blob; cat /work/f{i % 10}; kill -0 {loop} && echo up")
        assert got == f"{mem}\n{i}\nup", f"cycle {i}"
    assert sbx.info().state == "running"
    pid, argv = qemu_of(daemon, sbx.id)
    base = re.search(r"mem-path=([^,]+)", mem_backend(argv)).group(1)
    assert "share=off" in mem_backend(argv), mem_backend(argv)  # not a RAM file of its own
    kb = mapping_kb(pid, base)
    assert kb["Anonymous"] < 128 << 10, kb  # what it wrote (8 MB and its own), not its RAM
    assert kb["Rss"] > kb["Anonymous"], kb  # the template's pages, shared


def test_three_resumes_in_a_row_lose_nothing(make_sandbox):
    """E2B #884, #736: files lost after the second resume, the second resume answering 500."""
    sbx = make_sandbox(template="base")
    for i in range(3):
        sh(sbx, f"echo round{i} > /work/r{i}")
        session = sbx.pause()
        sbx = cpuos.Sandbox.resume(session)
        assert sbx.state == "running"
    assert sh(sbx, "cat /work/r0 /work/r1 /work/r2") == "round0\nround1\nround2"


def test_timeout_is_kept_across_resume_and_can_be_extended(make_sandbox):
    sbx = make_sandbox(template="base", timeout="10m")
    time.sleep(2)
    sbx.pause()
    time.sleep(3)  # paused time does not count
    sbx = cpuos.Sandbox.resume(sbx.id)
    left = _ts(sbx.expires_at) - time.time()
    assert 590 - 2 <= left <= 600 - 2 + 1, left  # not reset to 10 min, not the pause taken off
    sbx.set_timeout("1h")
    assert 3590 <= _ts(sbx.info().expires_at) - time.time() <= 3601


def _ts(rfc3339):
    return datetime.datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


def test_forks_are_independent(daemon, make_sandbox):
    parent = make_sandbox(template="base")
    sh(parent, "echo parent > /work/p")
    kids = parent.fork(count=2)
    try:
        # The parent came from the template's snapshot, so its RAM is private: its snapshot
        # is the pages it wrote, which each child writes over the template's RAM, not its
        # whole RAM moved into a file for them (test_qemu_builds.py looks at the children).
        assert f"sandbox {parent.id} forked 2 times" in daemon.log_tail(400)
        assert f"fork of {parent.id}: RAM moved into a file" not in daemon.log_tail(400)
        sh(kids[0], "echo mine > /work/k")
        assert sh(kids[1], "test -e /work/k || echo absent") == "absent"
        assert sh(parent, "test -e /work/k || echo absent") == "absent"
        assert all(sh(k, "cat /work/p") == "parent" for k in kids)
        rand = [sh(k, "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'") for k in kids]
        uuids = [sh(k, "cat /proc/sys/kernel/random/uuid") for k in kids]
        names = [sh(k, "hostname; cat /etc/machine-id") for k in kids + [parent]]
        assert rand[0] != rand[1] and uuids[0] != uuids[1]
        assert len(set(names)) == 3, names
        assert sh(kids[0], "hostname") == kids[0].id[4:]
    finally:
        for k in kids:
            k.kill()


def test_forks_of_python_differ_in_random_and_uuid4(make_sandbox):
    parent = make_sandbox(template="python")
    kids = parent.fork(count=2)
    try:
        prog = "python3 -c 'import os, random, uuid; print(os.urandom(8).hex(), random.random(), uuid.uuid4())'"
        outs = [sh(k, prog).split() for k in kids]
        assert all(a != b for a, b in zip(*outs)), outs
    finally:
        for k in kids:
            k.kill()


def test_clock_is_right_after_a_pause(make_sandbox):
    """The resume sets the guest's clock from the host's: a guest clock an hour behind (as it is
    after an hour's pause) is right again at the first command after it."""
    sbx = make_sandbox(template="base")
    r = sbx.exec("date -s @$(( $(date +%s) - 3600 )) >/dev/null && date +%s", user="root",
                 timeout=T)
    assert r.exit_code == 0 and int(r.stdout) < time.time() - 3500, (r.stdout, r.stderr)
    sbx.pause()
    assert abs(int(sh(sbx, "date +%s")) - time.time()) <= 2


def test_damaged_snapshot_is_refused_and_the_rest_serves(daemon, make_sandbox):
    a, b = make_sandbox(template="base"), make_sandbox(template="base")
    a.pause()
    b.pause()
    state = os.path.join(daemon.state_dir, "vms", a.id, "state")
    with open(state, "r+b") as f:
        f.seek(64)
        byte = f.read(1)
        f.seek(64)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(cpuos.CpuosError) as e:
        cpuos.Sandbox.resume(a.id)
    assert "checksum" in str(e.value), e.value
    assert a.info().state == "paused"  # not lost: it can be mended or deleted
    assert sh(b, "echo fine") == "fine"
    os.truncate(state, 100)
    with pytest.raises(cpuos.CpuosError) as e:
        a.exec("true")
    assert "wrong size" in str(e.value), e.value


def test_usage_of_one_key(own_daemon):
    d = own_daemon()
    key = d.key_a
    t0 = time.time()
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=d.url)
    time.sleep(4)
    sbx.pause()
    ran = time.time() - t0
    time.sleep(3)
    u = cpuos.usage(api_key=key, api_url=d.url)
    assert abs(u.running_seconds - ran) <= 1.5, (u.running_seconds, ran)
    assert u.paused_gib_seconds > 0 and u.sandboxes == 1


def test_paused_sandboxes_survive_a_daemon_restart(own_daemon):
    d = own_daemon()
    sbx = cpuos.Sandbox.create(template="base", api_key=d.key_a, api_url=d.url)
    sh(sbx, "echo kept > /work/k")
    sbx.pause()
    d.restart(kill=True)
    s2 = cpuos.Sandbox.connect(sbx.id, api_key=d.key_a, api_url=d.url)
    assert s2.state == "paused"
    assert sh(s2, "cat /work/k") == "kept"


def test_a_pause_restores_only_under_the_egress_ca_its_guest_trusts(own_daemon, tmp_path):
    """The nodes of a cluster are given one egress CA (--egress-ca DIR, a copy on each): a guest
    trusts the CA it was booted with, so its pause names that CA, and a daemon whose proxy signs
    with another refuses it with a clear error, leaving it paused; under the same CA it resumes."""
    ca, other = tmp_path / "ca", tmp_path / "other"
    d = own_daemon("--egress-ca", str(ca), "--template-snapshots", "off")
    for name in ("ca.pem", "ca.key", "seal.key"):  # made there; the keys root's alone
        st = os.lstat(ca / name)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == 0, name
        assert name == "ca.pem" or st.st_mode & 0o077 == 0, name
    pem = (ca / "ca.pem").read_text()
    sbx = cpuos.Sandbox.create(template="base", api_key=d.key_a, api_url=d.url)
    assert sh(sbx, "cat /usr/local/share/ca-certificates/cpuos-egress.crt") == pem.strip()
    sh(sbx, "echo kept > /work/k")
    sbx.pause()
    with open(os.path.join(d.state_dir, "vms", sbx.id, "manifest.json")) as f:
        made = json.load(f)["made_with"]
    der = subprocess.run(["openssl", "x509", "-outform", "DER"], input=pem.encode(),
                         capture_output=True, check=True).stdout
    assert made["egress_ca"] == hashlib.sha256(der).hexdigest()

    i = d.extra_args.index(str(ca))
    d.extra_args[i] = str(other)
    d.restart(kill=False)
    assert (other / "ca.pem").read_text() != pem
    r = d.http("POST", f"/v1/sandboxes/{sbx.id}/resume", key=d.key_a)
    assert r.status == 503 and "egress CA" in r.json()["error"]["message"], r
    assert d.http("GET", f"/v1/sandboxes/{sbx.id}", key=d.key_a).json()["state"] == "paused"

    d.extra_args[i] = str(ca)
    d.restart(kill=False)
    s2 = cpuos.Sandbox.connect(sbx.id, api_key=d.key_a, api_url=d.url)
    assert sh(s2, "cat /work/k") == "kept"


def test_template_snapshot_and_warm_pool(own_daemon):
    d = own_daemon("--pool-python", "1")
    deadline = time.monotonic() + 300 * SLOW
    while time.monotonic() < deadline:  # the snapshot is built (or found cached), then the pool
        m = d.http("GET", "/metrics", unix=True).body.decode()
        if "cpuos_pool_depth 1" in m:
            break
        time.sleep(1)
    else:
        pytest.fail("the warm pool did not fill:\n" + d.log_tail(30))
    t0 = time.monotonic()
    sbx = cpuos.Sandbox.create(template="python", api_key=d.key_a, api_url=d.url)
    took = time.monotonic() - t0
    assert sh(sbx, "hostname") == sbx.id[4:]  # the pool's VM took the sandbox's name
    assert "warm pool" in d.log_tail(40)
    m = d.http("GET", "/metrics", unix=True).body.decode()
    assert "cpuos_pool_claims_total 1" in m, m
    # the next create restores the snapshot (the pool refills in the background)
    other = cpuos.Sandbox.create(template="python", api_key=d.key_a, api_url=d.url,
                                 metadata={"n": "2"})
    assert sh(other, "python3 -c 'print(6 * 7)'") == "42"
    assert sh(other, "cat /etc/machine-id") != sh(sbx, "cat /etc/machine-id")
    print(f"create from the warm pool: {took * 1000:.0f} ms")

    # A daemon killed with a warm VM in its pool: the next one kills that VM.
    _wait_pool(d, 1)
    pooled = [pid for pid, sid in _qemus(d) if sid not in (sbx.id, other.id)]
    assert pooled, list(_qemus(d))
    d.restart(kill=True)
    time.sleep(1)
    alive = [pid for pid in pooled if _alive(pid)]
    assert not alive, d.log_tail(20)


def _wait_pool(d, depth):
    deadline = time.monotonic() + 120 * SLOW
    while time.monotonic() < deadline:
        if f"cpuos_pool_depth {depth}" in d.http("GET", "/metrics", unix=True).body.decode():
            return
        time.sleep(0.5)
    pytest.fail("the warm pool did not refill:\n" + d.log_tail(30))


def _qemus(d, under="vms", name=r"sbx_[0-9a-f]+"):
    """(pid, name) of every QEMU whose run directory is d's state_dir/under/name."""
    pattern = re.compile(re.escape(os.path.join(d.state_dir, under)) + f"/({name})/qmp.sock")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
        except OSError:
            continue
        m = pattern.search(cmd)
        if "qemu-system" in cmd and m:
            yield int(pid), m.group(1)


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False
