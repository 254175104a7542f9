"""The cpuos CLI against a real cpuosd: what a user types, over the socket and over TCP with a key."""
import hashlib
import os
import subprocess

import pytest

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
