"""make install into a staging directory (DESTDIR): the programs, the guest, the docs, systemd units
that systemd-analyze accepts with their paths written in, and configuration that the programs read
and that a second install leaves as the administrator changed it."""

import os
import shutil
import subprocess
import tempfile

import pytest

from conftest import ROOT


@pytest.fixture(scope="module")
def staged():
    d = tempfile.mkdtemp(prefix="cpuos-install-", dir="/tmp")
    out = subprocess.run(["make", "-s", "install", f"DESTDIR={d}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_programs_guest_and_docs_are_installed(staged):
    prefix = os.path.join(staged, "usr/local")
    for prog in ("cpuosd", "cpuos", "cpuos-gateway", "cpuos-e2b", "cpuos-api", "cpuos-vm"):
        path = os.path.join(prefix, "bin", prog)
        assert os.access(path, os.X_OK), prog
        out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and "usage" in (out.stdout + out.stderr).lower(), prog
    guest = os.path.join(prefix, "lib/cpuos/guest")
    for f in ("bzImage", "initramfs.cpio", "cpuos-agent", "templates/base.erofs",
              "templates/python.erofs", "templates/node.erofs"):
        path = os.path.join(guest, f)
        assert os.path.isfile(path) and not os.path.islink(path), f  # copies, not the cache's links
        assert os.path.getsize(path) == os.path.getsize(os.path.join(ROOT, "build/guest", f)), f
    assert os.path.isfile(os.path.join(prefix, "share/doc/cpuos/api.md"))


def test_units_verify_and_configs_parse(staged, tmp_path):
    units = os.path.join(staged, "etc/systemd/system")
    checked = []
    for name in ("cpuosd.service", "cpuos-gateway.service", "cpuos-e2b.service",
                 "cpuos-api.service"):
        with open(os.path.join(units, name)) as f:
            text = f.read()
        assert "@BINDIR@" not in text and "/usr/local/bin/" in text, name
        # systemd-analyze checks that ExecStart's program is there: the staged one.
        copy = tmp_path / name
        copy.write_text(text.replace("/usr/local/bin/", os.path.join(staged, "usr/local/bin/")))
        checked.append(str(copy))
    out = subprocess.run(["systemd-analyze", "verify", *checked], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr

    conf = os.path.join(staged, "etc/cpuos/cpuosd.conf")
    with open(conf) as f:
        assert "guest-dir = /usr/local/lib/cpuos/guest" in f.read()
    for prog, cfg in (("cpuosd", "cpuosd.conf"), ("cpuos-gateway", "gateway.conf"),
                      ("cpuos-e2b", "e2b.conf"), ("cpuos-api", "api.conf")):
        out = subprocess.run([os.path.join(staged, "usr/local/bin", prog), "--config",
                              os.path.join(staged, "etc/cpuos", cfg), "--help"],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, (prog, out.stderr)

    # The administrator's changes survive another install.
    with open(conf, "a") as f:
        f.write("listen = 0.0.0.0:7070\n")
    out = subprocess.run(["make", "-s", "install", f"DESTDIR={staged}"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    with open(conf) as f:
        assert f.read().endswith("listen = 0.0.0.0:7070\n")
