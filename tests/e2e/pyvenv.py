"""Virtualenvs of pinned PyPI packages for the tests that run a client as its users install it
(E2B's SDKs, the MCP SDK): one per content of a requirements file, kept in
$XDG_CACHE_HOME/cpuos-tests (~/.cache/cpuos-tests) so that a clean clone (CI's) finds them made."""
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cpuos-tests"


def venv_python(req):
    """The python of the virtualenv that holds requirements file req (a Path)."""
    want = hashlib.sha256(req.read_bytes()).hexdigest()
    d = CACHE / "venv" / f"{req.stem.removeprefix('requirements-')}-{want[:16]}"
    stamp, py = d / ".requirements", d / "bin" / "python"
    if stamp.exists() and stamp.read_text() == want and py.exists():
        return str(py)
    shutil.rmtree(d, ignore_errors=True)
    r = subprocess.run(["python3", "-m", "venv", str(d)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.fail(f"cannot make a virtualenv (python3-venv): {r.stderr.strip()}", pytrace=False)
    print(f"installing {req.name} into {d}", flush=True)
    r = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                        "-r", str(req)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        pytest.fail(f"cannot install {req} from PyPI: {r.stderr.strip()[-500:]}", pytrace=False)
    stamp.write_text(want)
    return str(py)
