"""QEMU builds (issue 23): a snapshot's RAM is read-only to the QEMUs that map it, and a pause
made by one QEMU build resumes on that build after the daemon runs another.

Every QEMU runs from a build kept by content in the cache (src/runner/qemu_build.h). The other
build here is Debian 12's own QEMU 7.2, unpacked beside the installed QEMU 10 by
scripts/qemu-other.sh (downloaded from the same mirror the machine's packages come from).
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

import cpuos
from conftest import (ROOT, SLOW, mapping_kb, mem_backend, qemu_of, restored_from_snapshot,
                      started_daemon)

T = 60 * SLOW
OTHER_DIR = "/var/cache/cpuos/qemu-debian12"


def sh(sbx, cmd):
    r = sbx.exec(cmd, timeout=T)
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout.strip()


def template_ram(path):
    """The template snapshot's RAM file that path is (a link to it), in the cache."""
    found = [m for m in glob.glob("/var/cache/cpuos/snapshots/*/mem") if os.path.samefile(m, path)]
    assert found, f"{path} is no template snapshot's RAM"
    return found[0]


def assert_read_only(pid, argv, path):
    """QEMU maps path private and holds it open read-only; inside its jail (its mount namespace,
    its root) even root cannot open it for writing; no one but its readers' group reads it."""
    assert "readonly=on,rom=off" in mem_backend(argv), mem_backend(argv)
    fds = [fd for fd in os.listdir(f"/proc/{pid}/fd")
           if os.readlink(f"/proc/{pid}/fd/{fd}") == path]
    for fd in fds:
        with open(f"/proc/{pid}/fdinfo/{fd}") as f:
            flags = int(re.search(r"flags:\s+([0-7]+)", f.read()).group(1), 8)
        assert flags & os.O_ACCMODE == os.O_RDONLY, oct(flags)
    with open(f"/proc/{pid}/maps") as f:
        maps = [line.split() for line in f if line.rstrip().endswith(" " + path)]
    assert maps, "QEMU does not map the snapshot's RAM"
    for m in maps:
        assert m[1][3] == "p", m  # private: what the guest writes stays QEMU's
    assert os.stat(path).st_mode & 0o222 == 0, oct(os.stat(path).st_mode)
    r = subprocess.run(["nsenter", "-t", str(pid), "-m", "-r", "-w", "--",
                        "/bin/sh", "-c", f"echo x >> '{path}'"], capture_output=True, text=True)
    assert r.returncode != 0 and "Read-only file system" in r.stderr, (r.returncode, r.stderr)
    r = subprocess.run(["nsenter", "-t", str(pid), "-m", "-r", "-w", "--",
                        "/bin/sh", "-c", f"test -r '{path}'"])
    assert r.returncode == 0  # the same path, so it is the jail's bind that refuses


def test_a_snapshots_memory_is_read_only_to_every_qemu_that_maps_it(daemon, make_sandbox):
    """A template's snapshot and a checkpoint, each restored: the RAM file under both is opened
    read-only (QEMU 10's rom=off) and bound read-only into the jail."""
    sbx, pid, argv, path = restored_from_snapshot(daemon, lambda: make_sandbox(template="python"))
    # the template's snapshot in the cache, linked into the run directory
    assert path == os.path.join(daemon.state_dir, "vms", sbx.id, "base"), path
    template_ram(path)
    assert_read_only(pid, argv, path)
    assert sh(sbx, "python3 -c 'print(6 * 7)'") == "42"  # the guest writes its RAM all the same

    # A checkpoint keeps the RAM file of its sandbox (one of its own, after a cold boot) or the
    # one its pages are over (linked), which the sandboxes made from it map.
    parent = make_sandbox(template="base")
    parent.pause()
    parent = cpuos.Sandbox.connect(parent.id)
    sh(parent, "echo at-the-checkpoint > /work/k")  # resumed
    ckp = parent.checkpoint(f"ro-{parent.id[-8:]}")
    try:
        child = make_sandbox(template=None, checkpoint=ckp)
        cpid, cargv = qemu_of(daemon, child.id)
        cpath = re.search(r"mem-path=([^,]+)", mem_backend(cargv)).group(1)
        cdir = os.path.join(daemon.state_dir, "checkpoints", ckp.id)
        ram = next(os.path.join(cdir, f) for f in ("mem", "base")
                   if os.path.exists(os.path.join(cdir, f)))
        assert os.stat(cpath).st_ino == os.stat(ram).st_ino, (cpath, ram)
        assert_read_only(cpid, cargv, cpath)
        assert sh(child, "cat /work/k") == "at-the-checkpoint"
    finally:
        ckp.delete()


def test_a_pause_writes_only_the_pages_its_guest_wrote(daemon, make_sandbox):
    """A python sandbox restored from the template's snapshot pauses into the pages its guest
    wrote, not its whole RAM, over a link to the snapshot's RAM file; it resumes on that link,
    read-only to its QEMU, with its memory, files and processes, and the pages it never wrote
    still the snapshot's. Its second pause is such a diff again, and so is the third."""
    sbx, pid, argv, base = restored_from_snapshot(daemon, lambda: make_sandbox(template="python"))
    run = os.path.join(daemon.state_dir, "vms", sbx.id)
    assert base == os.path.join(run, "base"), base
    path = template_ram(base)
    blob = sh(sbx, "head -c 8388608 /dev/urandom > /dev/shm/blob && sha256sum < /dev/shm/blob")
    sh(sbx, "nohup sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 & echo $! > /work/pid")
    loop = sh(sbx, "cat /work/pid")
    ram = 512 << 20
    for cycle in range(3):
        sh(sbx, f"echo {cycle} > /work/cycle")
        sbx.pause()
        with open(os.path.join(run, "manifest.json")) as f:
            doc = json.load(f)
        assert doc["ram"] == "diff", (cycle, doc["ram"])
        pages = doc["files"]["pages"]["size"]
        # the 8 MB written and what the guest wrote besides, not its RAM
        assert 8 << 20 < pages < ram // 2, (cycle, pages)
        assert doc["files"]["state"]["size"] < 4 << 20, doc["files"]["state"]
        assert os.stat(base).st_ino == os.stat(path).st_ino  # the snapshot's RAM, linked
        assert os.stat(base).st_mode & 0o222 == 0, oct(os.stat(base).st_mode)
        sbx = cpuos.Sandbox.connect(sbx.id)
        assert sh(sbx, "sha256sum < /dev/shm/blob; cat /work/cycle") == f"{blob}\n{cycle}"
        assert sh(sbx, f"kill -0 {loop} && echo alive") == "alive"
        assert sh(sbx, "python3 -c 'print(6 * 7)'") == "42"
        assert not os.path.exists(os.path.join(run, "pages")), "the pause outlived its resume"
        qpid, qargv = qemu_of(daemon, sbx.id)
        assert re.search(r"mem-path=([^,]+)", mem_backend(qargv)).group(1) == base
        assert_read_only(qpid, qargv, base)
        # what it wrote is its own again; the rest is still the snapshot's pages
        anon = mapping_kb(qpid, base)["Anonymous"] << 10
        assert pages // 2 < anon < pages + (64 << 20), (cycle, anon, pages)


def test_checkpoints_and_forks_of_a_restored_sandbox_keep_only_its_pages(daemon, make_sandbox):
    """A checkpoint of a python sandbox restored from the template's snapshot holds the pages its
    guest wrote over a link to the snapshot's RAM, not its RAM; a sandbox made from it, and forks
    of the sandbox, map that RAM read-only with those pages written over it, and have what it had.
    The sandbox made from the checkpoint pauses into its own pages over the same RAM. Ten forks
    are each independent and share the template's pages."""
    sbx, _, _, path = restored_from_snapshot(daemon, lambda: make_sandbox(template="python"))
    sh(sbx, "echo at-the-checkpoint > /work/k; head -c 4194304 /dev/urandom > /dev/shm/b")
    blob = sh(sbx, "sha256sum < /dev/shm/b")
    ckp = sbx.checkpoint(f"pg-{sbx.id[-8:]}")
    try:
        cdir = os.path.join(daemon.state_dir, "checkpoints", ckp.id)
        with open(os.path.join(cdir, "manifest.json")) as f:
            doc = json.load(f)
        assert doc["ram"] == "diff" and doc["sealed"], (doc["ram"], doc["sealed"])
        assert 4 << 20 < doc["files"]["pages"]["size"] < 256 << 20, doc["files"]["pages"]
        assert os.stat(os.path.join(cdir, "base")).st_ino == os.stat(path).st_ino
        assert len(doc["files"]["base"]["sha256"]) == 64  # the template's, sealed with it

        child = make_sandbox(template=None, checkpoint=ckp)
        cpid, cargv = qemu_of(daemon, child.id)
        cpath = re.search(r"mem-path=([^,]+)", mem_backend(cargv)).group(1)
        assert cpath == os.path.join(daemon.state_dir, "vms", child.id, "base"), cpath
        assert os.stat(cpath).st_ino == os.stat(path).st_ino  # linked into its run directory
        assert_read_only(cpid, cargv, cpath)
        assert sh(child, "cat /work/k; sha256sum < /dev/shm/b") == f"at-the-checkpoint\n{blob}"
        sh(child, "echo child > /work/c")
        child.pause()
        with open(os.path.join(daemon.state_dir, "vms", child.id, "manifest.json")) as f:
            assert json.load(f)["ram"] == "diff"
        child = cpuos.Sandbox.connect(child.id)
        assert sh(child, "cat /work/k /work/c") == "at-the-checkpoint\nchild"

        # Ten forks: each has what the parent had and goes its own way (files, random
        # numbers); each holds the parent's pages and what it wrote since, and maps the rest
        # from the template's RAM, shared.
        kids = sbx.fork(count=10)
        try:
            rand = set()
            for i, kid in enumerate(kids):
                kpid, kargv = qemu_of(daemon, kid.id)
                kpath = re.search(r"mem-path=([^,]+)", mem_backend(kargv)).group(1)
                assert os.stat(kpath).st_ino == os.stat(path).st_ino, kpath
                assert "readonly=on,rom=off" in mem_backend(kargv)
                assert sh(kid, f"cat /work/k; sha256sum < /dev/shm/b; echo {i} > /work/kid") == \
                    f"at-the-checkpoint\n{blob}"
                rand.add(sh(kid, "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \\n'"))
                kb = mapping_kb(kpid, kpath)
                assert kb["Anonymous"] << 10 < doc["files"]["pages"]["size"] + (64 << 20), kb
                assert kb["Rss"] > kb["Anonymous"], kb  # template pages, shared
            assert len(rand) == 10, rand
            assert [sh(k, "cat /work/kid") for k in kids] == [str(i) for i in range(10)]
        finally:
            for kid in kids:
                kid.kill()
    finally:
        ckp.delete()


def test_a_pause_costs_what_its_guest_wrote(daemon, make_sandbox):
    """Two sandboxes restored from the template's snapshot: one writes 4 KB, the other 400 MB, and
    each pauses. What the pause saves differs by what was written; the times are printed."""
    small = restored_from_snapshot(daemon, lambda: make_sandbox(template="base"))[0]
    big = restored_from_snapshot(daemon, lambda: make_sandbox(template="base"))[0]
    sh(small, "head -c 4096 /dev/urandom > /work/small")
    r = big.exec("mount -o remount,size=480m /dev/shm && "
                 "yes cpuos | head -c 419430400 > /dev/shm/big", user="root", timeout=T)
    assert r.exit_code == 0, (r.stdout, r.stderr)
    probe = ("stat -c %s /dev/shm/big; head -c 1048576 /dev/shm/big | md5sum; "
             "tail -c 4096 /dev/shm/big | md5sum")
    before = sh(big, probe)
    saved, took = {}, {}
    for name, sbx in (("4 KB", small), ("400 MB", big)):
        t0 = time.monotonic()
        sbx.pause()
        took[name] = time.monotonic() - t0
        with open(os.path.join(daemon.state_dir, "vms", sbx.id, "manifest.json")) as f:
            doc = json.load(f)
        assert doc["ram"] == "diff", doc["ram"]
        saved[name] = doc["files"]["pages"]["size"] + doc["files"]["state"]["size"]
    print(f"pause after 4 KB written: {took['4 KB'] * 1000:.0f} ms, {saved['4 KB'] / 2**20:.1f} MB "
          f"saved; after 400 MB: {took['400 MB'] * 1000:.0f} ms, {saved['400 MB'] / 2**20:.1f} MB")
    assert saved["4 KB"] < 64 << 20, saved
    assert saved["400 MB"] - saved["4 KB"] >= 400 << 20, saved
    big = cpuos.Sandbox.connect(big.id)
    assert before.startswith("419430400\n") and sh(big, probe) == before


@pytest.fixture(scope="module")
def other_qemu():
    r = subprocess.run([str(ROOT / "scripts/qemu-other.sh"), OTHER_DIR], capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail("scripts/qemu-other.sh could not unpack Debian 12's QEMU: " + r.stderr[-500:],
                    pytrace=False)
    path = r.stdout.strip()
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    installed = subprocess.run(["qemu-system-x86_64", "--version"], capture_output=True,
                               text=True).stdout
    assert version.split("\n")[0] != installed.split("\n")[0], "the two QEMUs are one"
    return path


def manifest(d, sbx_id):
    with open(os.path.join(d.state_dir, "vms", sbx_id, "manifest.json")) as f:
        return json.load(f)["made_with"]


def test_a_pause_resumes_on_the_qemu_build_that_made_it(other_qemu):
    """Paused under QEMU 7.2, resumed by a daemon restarted on QEMU 10: the sandbox comes back
    on the 7.2 build the cache kept (its files and its processes there), while a new sandbox
    runs on 10. With that build gone, the resume is refused, naming it, and the pause stays;
    with 7.2 saved as an upgrade's outgoing QEMU, a manifest naming no build resumes on it."""
    # a cache of its own, whose kept builds it may remove
    cache = tempfile.mkdtemp(prefix="cpuos-cache-", dir="/tmp")
    os.chmod(cache, 0o755)
    gen = started_daemon("--qemu", other_qemu, "--template-snapshots", "off", "--cache-dir", cache)
    d = next(gen)
    try:
        sbx = cpuos.Sandbox.create(template="base", timeout="10m", api_key=d.key_a, api_url=d.url)
        pid, argv = qemu_of(d, sbx.id)
        old_bin = argv[0]
        assert old_bin.startswith(os.path.join(cache, "qemu") + "/"), old_bin
        assert os.readlink(f"/proc/{pid}/exe") == old_bin
        sh(sbx, "echo kept > /work/k; nohup sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 &"
                " echo $! > /work/pid")
        loop = sh(sbx, "cat /work/pid")
        sbx.pause()
        made = manifest(d, sbx.id)
        assert made["qemu"].startswith("7.2."), made
        old_build = made["qemu_build"]
        assert f"/{old_build}/bin/" in old_bin

        i = d.extra_args.index("--qemu")
        del d.extra_args[i:i + 2]
        d.restart(kill=False)
        assert "QEMU 10." in d.log_tail(40)
        s2 = cpuos.Sandbox.connect(sbx.id, api_key=d.key_a, api_url=d.url)
        assert sh(s2, "cat /work/k") == "kept"
        assert sh(s2, f"kill -0 {loop} && echo alive") == "alive"
        pid, argv = qemu_of(d, sbx.id)
        assert argv[0] == old_bin, argv[0]

        new = cpuos.Sandbox.create(template="base", timeout="5m", api_key=d.key_a, api_url=d.url)
        _, nargv = qemu_of(d, new.id)
        assert nargv[0] != old_bin and nargv[0].startswith(os.path.join(cache, "qemu") + "/")
        assert sh(new, "echo hi") == "hi"
        new.kill()

        s2.pause()  # paused again: still by the build that runs it
        assert manifest(d, sbx.id)["qemu_build"] == old_build
        d.stop()
        shutil.rmtree(os.path.join(cache, "qemu", old_build))
        d.start()
        r = d.http("POST", f"/v1/sandboxes/{sbx.id}/resume", key=d.key_a)
        assert r.status >= 400, r
        msg = r.json()["error"]["message"]
        assert "QEMU" in msg and old_build in msg, msg
        assert d.http("GET", f"/v1/sandboxes/{sbx.id}", key=d.key_a).json()["state"] == "paused"

        # A pause made by a cpuos before kept builds names none: it resumes on a kept build of
        # its version, here the one scripts/deps.sh saves of the QEMU an upgrade replaces.
        path = os.path.join(d.state_dir, "vms", sbx.id, "manifest.json")
        with open(path) as f:
            doc = json.load(f)
        del doc["made_with"]["qemu_build"]
        with open(path, "w") as f:
            json.dump(doc, f)
        d.stop()
        shutil.copytree(OTHER_DIR, os.path.join(cache, "qemu-outgoing", "7.2"), symlinks=True)
        d.start()
        assert "replaced by an upgrade: build" in d.log_tail(40)
        s3 = cpuos.Sandbox.connect(sbx.id, api_key=d.key_a, api_url=d.url)
        assert sh(s3, "cat /work/k") == "kept"
        assert sh(s3, f"kill -0 {loop} && echo alive") == "alive"
        _, argv = qemu_of(d, sbx.id)
        out = subprocess.run([argv[0], "--version"], capture_output=True, text=True).stdout
        assert out.startswith("QEMU emulator version 7.2."), out
    finally:
        try:
            next(gen)
        except StopIteration:
            pass
        shutil.rmtree(cache, ignore_errors=True)
