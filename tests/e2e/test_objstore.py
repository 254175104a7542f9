"""Pauses kept in a real S3 object store (Swift's s3api, scripts/objstore.sh) by a real cpuosd
(--s3-endpoint): a pause goes up in the background and GET says so; a sandbox whose pause the
host's disk lost resumes from the store with its files and its live processes; a resume stops an
upload stuck on a store that stopped answering; a stored pause altered in the store is refused;
a deleted sandbox's objects go; checkpoints go up by their content, come down where the disk lost
them, are refused altered, and their objects go with them."""

import glob
import hashlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import cpuos
from conftest import ROOT, SLOW, Daemon

BUCKET = "cpuos-e2e"


def _free_block(n=5):
    """The first of n consecutive free TCP ports on 127.0.0.1."""
    for _ in range(200):
        base = random.randrange(30000, 40000 - n)
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
    pytest.fail("no 5 free ports in a row on 127.0.0.1")


class ObjStore:
    """scripts/objstore.sh's store, and curl to look into it (signed with its key, from a netrc
    file: the key has a colon, which curl's -u would split)."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cpuos-objstore-", dir="/tmp")
        out = subprocess.run([str(ROOT / "scripts/objstore.sh"), "up", self.dir, str(_free_block())],
                             capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            pytest.fail(f"scripts/objstore.sh up failed: {out.stderr.strip()}", pytrace=False)
        self.env = {}
        for line in out.stdout.splitlines():
            if line.startswith("export ") and "=" in line:
                k, v = line[7:].split("=", 1)
                self.env[k] = v
        self.endpoint = self.env["CPUOS_S3_ENDPOINT"]
        self.netrc = os.path.join(self.dir, "netrc")
        with open(self.netrc, "w") as f:
            f.write(f"machine 127.0.0.1 login {self.env['CPUOS_S3_ACCESS_KEY']} "
                    f"password {self.env['CPUOS_S3_SECRET_KEY']}\n")

    def curl(self, method, key, data_file=None):
        """(HTTP status, body) of one signed request for key in the bucket."""
        args = ["curl", "-s", "-X", method, "--aws-sigv4", "aws:amz:us-east-1:s3",
                "--netrc-file", self.netrc, "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
                "-w", "\n%{http_code}", f"{self.endpoint}/{BUCKET}/{key}"]
        if method == "HEAD":
            args[args.index("-X"):args.index("-X") + 2] = ["-I"]
        if data_file:
            args += ["-T", data_file]
        out = subprocess.run(args, capture_output=True, timeout=60)
        body, _, code = out.stdout.rpartition(b"\n")
        return int(code or 0), body

    def proxy_pid(self):
        with open(os.path.join(self.dir, "run", "proxy.pid")) as f:
            return int(f.read())

    def proxy_kill(self):
        """The store goes away: its S3 endpoint refuses connections (the proxy and its workers
        killed), what it stored kept."""
        pid = self.proxy_pid()
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        while subprocess.run(["curl", "-s", "-o", "/dev/null", self.endpoint]).returncode == 0:
            time.sleep(0.1)

    def proxy_start(self):
        """The store back, as objstore.sh started it."""
        conf = os.path.join(self.dir, "etc", "proxy-server.conf")
        with open(os.path.join(self.dir, "log", "proxy.log"), "ab") as log:
            p = subprocess.Popen(["swift-proxy-server", conf], stdout=log, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, start_new_session=True)
        with open(os.path.join(self.dir, "run", "proxy.pid"), "w") as f:
            f.write(str(p.pid))
        deadline = time.monotonic() + 60
        while subprocess.run(["curl", "-s", "-o", "/dev/null", self.endpoint]).returncode != 0:
            assert time.monotonic() < deadline, "the object store's proxy did not come back"
            time.sleep(0.2)

    def close(self):
        subprocess.run([str(ROOT / "scripts/objstore.sh"), "down", self.dir], timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def store():
    s = ObjStore()
    yield s
    s.close()


@pytest.fixture(scope="module")
def s3d(store):
    """A cpuosd that keeps every pause in the store; its key and secret from the environment."""
    d = Daemon(extra_args=["--s3-endpoint", store.endpoint, "--s3-bucket", BUCKET])
    d.s3_env = {"CPUOS_S3_ACCESS_KEY": store.env["CPUOS_S3_ACCESS_KEY"],
                "CPUOS_S3_SECRET_KEY": store.env["CPUOS_S3_SECRET_KEY"]}
    try:
        d.start(env=d.s3_env)
        d.key_a = d.create_key("objstore")
        yield d
    finally:
        d.close()


def sh(sbx, cmd):
    r = sbx.exec(cmd, timeout="60s")
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout.strip()


def info(d, sid):
    r = d.http("GET", f"/v1/sandboxes/{sid}", key=d.key_a)
    assert r.status == 200, r
    return r.json()


def wait_stored(d, sid, limit=120):
    deadline = time.monotonic() + limit * SLOW
    while time.monotonic() < deadline:
        if info(d, sid)["stored"]:
            return time.monotonic()
        time.sleep(0.2)
    pytest.fail(f"{sid}'s pause was not stored in {limit * SLOW} s:\n{d.log_tail(20)}")


def lose_local_pause(d, sid):
    """What a lost disk leaves of a pause: nothing."""
    run = os.path.join(d.state_dir, "vms", sid)
    os.unlink(os.path.join(run, "manifest.json"))
    for name in ("state", "mem", "scratch.qcow2"):  # mem only when the RAM is in a file of its own
        if os.path.exists(os.path.join(run, name)):
            os.unlink(os.path.join(run, name))
    assert not os.path.exists(os.path.join(run, "state"))


def test_a_pause_outlives_the_disk_it_was_made_on(s3d, store):
    sbx = cpuos.Sandbox.create(template="base", api_key=s3d.key_a, api_url=s3d.url)
    sh(sbx, "echo kept > /work/k && head -c 4194304 /dev/urandom > /dev/shm/blob")
    blob = sh(sbx, "sha256sum < /dev/shm/blob")
    # A process that lives through it all: its pid and its counter go on.
    sh(sbx, "nohup sh -c 'n=0; while :; do n=$((n+1)); echo $n > /work/t && mv /work/t /work/tick; "
            "sleep 0.2; done' >/dev/null 2>&1 & echo $! > /work/pid; "
            "until [ -s /work/tick ]; do sleep 0.05; done")  # it ticked before the pause
    assert info(s3d, sbx.id)["stored"] is False
    t0 = time.monotonic()
    sbx.pause()
    assert info(s3d, sbx.id)["state"] == "paused"
    t = wait_stored(s3d, sbx.id)
    print(f"pause stored {t - t0:.2f} s after the pause was asked for")
    assert cpuos.Sandbox.connect(sbx.id, api_key=s3d.key_a, api_url=s3d.url).stored is True
    gen = 0
    code, _ = store.curl("HEAD", f"pauses/{sbx.id}/{gen}/manifest.json")
    assert code == 200, code
    s3d.stop()
    lose_local_pause(s3d, sbx.id)
    s3d.start(env=s3d.s3_env)
    s2 = cpuos.Sandbox.connect(sbx.id, api_key=s3d.key_a, api_url=s3d.url)
    assert s2.state == "paused"
    t0 = time.monotonic()
    assert sh(s2, "cat /work/k") == "kept"
    print(f"resumed from the object store in {time.monotonic() - t0:.2f} s")
    assert sh(s2, "sha256sum < /dev/shm/blob") == blob
    pid = sh(s2, "cat /work/pid")
    a = int(sh(s2, "cat /work/tick"))
    time.sleep(1)
    assert sh(s2, f"kill -0 {pid} && echo alive") == "alive"
    assert int(sh(s2, "cat /work/tick")) > a
    assert "fetched from the object store" in s3d.log_tail(200)
    # Deleted: its objects go from the store too, the manifest first, the disk last (after
    # which the worker is idle again, as the next test needs).
    s2.kill()
    deadline = time.monotonic() + 60 * SLOW
    for name in ("manifest.json", "state", "mem", "disk"):
        while store.curl("HEAD", f"pauses/{sbx.id}/{gen}/{name}")[0] != 404:
            assert time.monotonic() < deadline, f"a deleted sandbox's {name} stayed in the store"
            time.sleep(0.2)


def test_a_resume_stops_an_upload_the_store_does_not_take(s3d, store):
    sbx = cpuos.Sandbox.create(template="base", api_key=s3d.key_a, api_url=s3d.url)
    sh(sbx, "echo 1 > /work/x")
    pid = store.proxy_pid()
    os.kill(pid, signal.SIGSTOP)  # the store stops answering, connections stay open
    try:
        sbx.pause()
        time.sleep(1)  # the upload has begun and hangs
        assert info(s3d, sbx.id)["stored"] is False
        t0 = time.monotonic()
        assert sh(sbx, "cat /work/x") == "1"  # resumes it
        took = time.monotonic() - t0
        print(f"resume with an upload hanging: {took:.2f} s")
        assert took < 20 * SLOW
        assert "upload of its pause stopped" in s3d.log_tail(100)
    finally:
        os.kill(pid, signal.SIGCONT)
    # The store back: the next pause goes up.
    sbx.pause()
    wait_stored(s3d, sbx.id)
    sbx.kill()


def test_an_altered_stored_pause_is_refused(s3d, store):
    sbx = cpuos.Sandbox.create(template="base", api_key=s3d.key_a, api_url=s3d.url)
    sh(sbx, "echo 1 > /work/x")
    sbx.pause()
    wait_stored(s3d, sbx.id)
    s3d.stop()
    # Its device state in the store (compressed), one byte changed (same size), compressed again.
    code, packed = store.curl("GET", f"pauses/{sbx.id}/0/state")
    assert code == 200 and len(packed) > 100
    state = subprocess.run(["zstd", "-d", "-c"], input=packed, capture_output=True, check=True).stdout
    bad = os.path.join(store.dir, "bad-state")
    with open(bad, "wb") as f:
        f.write(subprocess.run(["zstd", "-1", "-c"], input=state[:64] + bytes([state[64] ^ 0xFF]) +
                               state[65:], capture_output=True, check=True).stdout)
    assert store.curl("PUT", f"pauses/{sbx.id}/0/state", bad)[0] == 200
    lose_local_pause(s3d, sbx.id)
    s3d.start(env=s3d.s3_env)
    with pytest.raises(cpuos.CpuosError) as e:
        cpuos.Sandbox.resume(sbx.id, api_key=s3d.key_a, api_url=s3d.url)
    assert "does not match its checksum" in str(e.value), e.value
    assert info(s3d, sbx.id)["state"] == "paused"  # not lost: it can be mended or deleted
    assert not glob.glob(os.path.join(s3d.state_dir, "vms", sbx.id, "fetch*"))
    s3d.http("DELETE", f"/v1/sandboxes/{sbx.id}", key=s3d.key_a)


def ckpt(d, cid):
    r = d.http("GET", f"/v1/checkpoints/{cid}", key=d.key_a)
    assert r.status == 200, r
    return r.json()


def test_a_checkpoint_goes_up_by_content_and_comes_down_where_the_disk_lost_it(s3d, store):
    sbx = cpuos.Sandbox.create(template="base", api_key=s3d.key_a, api_url=s3d.url)
    sh(sbx, "echo from-checkpoint > /work/c")
    r = s3d.http("POST", f"/v1/sandboxes/{sbx.id}/checkpoints", body={"name": "objstore-ckpt"},
                 key=s3d.key_a)
    assert r.status == 201, r
    cid = r.json()["id"]
    sbx.kill()
    deadline = time.monotonic() + 120 * SLOW
    while not ckpt(s3d, cid)["stored"]:
        assert time.monotonic() < deadline, f"checkpoint not stored:\n{s3d.log_tail(20)}"
        time.sleep(0.2)
    assert cpuos.Checkpoint.get(cid, api_key=s3d.key_a, api_url=s3d.url).stored is True
    local = os.path.join(s3d.state_dir, "checkpoints", cid)
    with open(os.path.join(local, "manifest.json"), "rb") as f:
        key = hashlib.sha256(f.read()).hexdigest()
    for name in ("manifest.json", "state", "disk"):
        assert store.curl("HEAD", f"checkpoints/{key}/{name}")[0] == 200, name

    def lose_and_create():
        shutil.rmtree(local)
        return s3d.http("POST", "/v1/sandboxes", body={"checkpoint": cid}, key=s3d.key_a)

    r = lose_and_create()
    assert r.status == 201, r
    s2 = cpuos.Sandbox.connect(r.json()["id"], api_key=s3d.key_a, api_url=s3d.url)
    assert sh(s2, "cat /work/c") == "from-checkpoint"
    assert "fetched from the object store" in s3d.log_tail(100)
    s2.kill()

    # Altered in the store (one byte of the disk layer, compressed again): refused, nothing kept.
    code, packed = store.curl("GET", f"checkpoints/{key}/disk")
    assert code == 200
    disk = subprocess.run(["zstd", "-d", "-c"], input=packed, capture_output=True, check=True).stdout
    bad = os.path.join(store.dir, "bad-disk")
    with open(bad, "wb") as f:
        f.write(subprocess.run(["zstd", "-1", "-c"], input=disk[:512] + bytes([disk[512] ^ 1]) +
                               disk[513:], capture_output=True, check=True).stdout)
    assert store.curl("PUT", f"checkpoints/{key}/disk", bad)[0] == 200
    r = lose_and_create()
    assert r.status == 503 and "does not match its checksum" in r.json()["error"]["message"], r
    assert not glob.glob(local + "*")

    # Deleted: its objects go.
    assert s3d.http("DELETE", f"/v1/checkpoints/{cid}", key=s3d.key_a).status == 204
    deadline = time.monotonic() + 60 * SLOW
    for name in ("manifest.json", "state", "mem", "disk"):
        while store.curl("HEAD", f"checkpoints/{key}/{name}")[0] != 404:
            assert time.monotonic() < deadline, f"a deleted checkpoint's {name} stayed in the store"
            time.sleep(0.2)


def test_a_daemon_refuses_store_settings_it_cannot_use():
    d = Daemon(extra_args=["--s3-endpoint", "ftp://nowhere", "--s3-bucket", BUCKET])
    try:
        with pytest.raises(pytest.fail.Exception) as e:
            d.start(env={"CPUOS_S3_ACCESS_KEY": "a", "CPUOS_S3_SECRET_KEY": "b"})
        assert "exited with 1" in str(e.value)
        assert "endpoint 'ftp://nowhere' is not http[s]://host[:port]" in d.log_tail(5)
    finally:
        d.close()
