"""Directories as tar streams against a real cpuosd: PUT and GET .../files/archive, through the SDK
(upload_dir, download_dir) and `cpuos cp -r` both ways: contents, modes, symlinks and empty
directories survive the trip; a body that is not an archive is a clear 422; a missing path a 404;
another account's key sees nothing."""

import hashlib
import io
import os
import subprocess
import tarfile

import pytest

import cpuos
from test_cpuos_cli import CPUOS

pytestmark = pytest.mark.timeout(600)


def make_tree(root):
    os.makedirs(os.path.join(root, "src", "deep"))
    os.makedirs(os.path.join(root, "empty"))
    with open(os.path.join(root, "src", "deep", "data.bin"), "wb") as f:
        f.write(os.urandom(300_000))
    with open(os.path.join(root, "run.sh"), "w") as f:
        f.write("#!/bin/sh\necho ran\n")
    os.chmod(os.path.join(root, "run.sh"), 0o755)
    os.symlink("src/deep/data.bin", os.path.join(root, "link"))


def digest(root):
    """Every entry under root: its relative path, kind, mode and content hash."""
    out = {}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(d, name)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            elif os.path.isdir(p):
                out[rel] = ("dir",)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", oct(st.st_mode & 0o777), hashlib.sha256(f.read()).hexdigest())
    return out


def test_sdk_round_trip(make_sandbox, tmp_path):
    sbx = make_sandbox(template="base")
    make_tree(tmp_path / "in")
    sbx.files.upload_dir(tmp_path / "in", "/work/proj")
    assert sbx.exec("/work/proj/run.sh").stdout == "ran\n"
    r = sbx.exec("stat -c '%U %a' /work/proj/run.sh; readlink /work/proj/link")
    assert r.stdout == "user 755\nsrc/deep/data.bin\n", r
    sbx.files.download_dir("/work/proj", tmp_path / "out")
    assert digest(tmp_path / "out") == digest(tmp_path / "in")
    # A single file as an archive: its name inside.
    names = tarfile.open(fileobj=io.BytesIO(b"".join(sbx.files.read_archive("/work/proj/run.sh")))).getnames()
    assert names == ["run.sh"]


def test_cli_cp_recursive_both_ways(daemon, make_sandbox, tmp_path):
    sbx = make_sandbox(template="base")
    make_tree(tmp_path / "in")
    env = dict(os.environ, CPUOS_API_URL=daemon.url, CPUOS_API_KEY=daemon.key_a)

    def cp(*args):
        return subprocess.run([CPUOS, "cp", *args], capture_output=True, text=True, env=env, timeout=300)

    r = cp("-r", str(tmp_path / "in"), f"{sbx.id}:/work/")  # a trailing / takes the source's name
    assert r.returncode == 0, r.stderr
    assert sbx.files.exists("/work/in/src/deep/data.bin")
    r = cp("-r", f"{sbx.id}:/work/in", str(tmp_path / "back"))
    assert r.returncode == 0, r.stderr
    assert digest(tmp_path / "back") == digest(tmp_path / "in")
    (tmp_path / "into").mkdir()
    r = cp("-r", f"{sbx.id}:/work/in", str(tmp_path / "into"))  # an existing directory: into it
    assert r.returncode == 0 and digest(tmp_path / "into" / "in") == digest(tmp_path / "in"), r.stderr
    r = cp("-r", f"{sbx.id}:/work/missing", str(tmp_path / "x"))
    assert r.returncode == 1 and "404" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    r = cp("-r", "-", f"{sbx.id}:/work/x")
    assert r.returncode == 2, r.stderr


def test_bad_archives_and_paths(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    path = f"/v1/sandboxes/{sbx.id}/files/archive"
    r = daemon.http("PUT", path + "?path=/work/x", b"this is not a tar archive" * 100, key=daemon.key_a)
    assert r.status == 422 and "not unpacked" in r.json()["error"]["message"], r
    r = daemon.http("GET", path + "?path=/work/nothing", key=daemon.key_a)
    assert r.status == 404, r
    r = daemon.http("GET", path + "?path=../etc", key=daemon.key_a)
    assert r.status == 400, r
    r = daemon.http("GET", path + "?path=/work", key=daemon.key_b)
    assert r.status == 404, r
    # A member named with ".." is refused by the guest's tar, and nothing lands outside.
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = b"escaped"
        info = tarfile.TarInfo("../../tmp/escaped")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    r = daemon.http("PUT", path + "?path=/work/in", buf.getvalue(), key=daemon.key_a)
    assert r.status == 422, r
    assert not sbx.files.exists("/tmp/escaped") and not sbx.files.exists("/work/tmp/escaped")
    with pytest.raises(cpuos.BadRequestError):
        sbx.files.write_archive("/work/y", b"\0" * 10)
