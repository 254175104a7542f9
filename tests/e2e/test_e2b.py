"""cpuos-e2b: E2B's own SDKs (PyPI `e2b` and `e2b-code-interpreter`, pinned versions in
tests/e2e/e2b/requirements-*.txt, each in a virtualenv of its own, cached: tests/e2e/pyvenv.py) against
cpuos-e2b in front of the session's cpuosd, and bad input on every route. The SDK's calls are
tests/e2e/e2b/client.py, as a user writes them; it prints one JSON line per call. The same for
E2B's JavaScript SDKs (npm `e2b` and `@e2b/code-interpreter`, pinned with lock files in
tests/e2e/e2b/js-*/, installed under the same cache): tests/e2e/e2b/client.mjs under node."""
import http.client
import json
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, Response, free_port
from pyvenv import CACHE, venv_python

E2B_BIN = Path(os.environ.get("CPUOS_E2B_BIN", ROOT / "build" / "bin" / "cpuos-e2b"))
HERE = Path(__file__).resolve().parent / "e2b"
NODE_DIRS = CACHE / "e2b-node"


def venv(label):
    """The virtualenv of tests/e2e/e2b/requirements-LABEL.txt: its python."""
    return venv_python(HERE / f"requirements-{label}.txt")


def node_dir(label):
    """tests/e2e/e2b/LABEL/ installed with `npm ci` in the cache (e2b-node/LABEL), again only when its
    lock file changed, with client.mjs beside its node_modules: that directory."""
    src = HERE / label
    d = NODE_DIRS / label
    lock = d / "package-lock.json"
    done = d / "node_modules" / ".package-lock.json"
    if not (lock.exists() and lock.read_bytes() == (src / "package-lock.json").read_bytes()
            and done.exists() and done.stat().st_mtime > lock.stat().st_mtime):
        missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
        if missing:
            pytest.fail(f"E2B's JavaScript SDK needs node and npm: {' and '.join(missing)} not on "
                        "PATH", pytrace=False)
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        for name in ("package.json", "package-lock.json"):
            shutil.copy(src / name, d / name)
        try:
            r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts",
                                "--loglevel=error"], cwd=d, capture_output=True, text=True,
                               timeout=600)
        except subprocess.TimeoutExpired:
            pytest.fail(f"npm ci of tests/e2e/e2b/{label} took over 600s", pytrace=False)
        if r.returncode != 0 or not done.exists():
            err = " ".join((r.stderr or r.stdout).split())[:400]  # npm says why first
            pytest.fail(f"cannot install tests/e2e/e2b/{label} from npm (npm ci exit "
                        f"{r.returncode}): {err}", pytrace=False)
    shutil.copy(HERE / "client.mjs", d / "client.mjs")
    return d


class E2b:
    """A cpuos-e2b process in front of daemon d."""

    def __init__(self, d, *args):
        self.d = d
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="cpuos-e2b-", dir="/tmp")
        self.log_path = os.path.join(self.dir, "e2b.log")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(E2B_BIN), "--listen", f"127.0.0.1:{self.port}", "--cpuos-url", d.url,
             "--state-dir", os.path.join(self.dir, "state"), *args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"cpuos-e2b exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.http("GET", "/health", timeout=5).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        pytest.fail(f"cpuos-e2b did not answer GET /health within 30s:\n{self.log_tail()}")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def env(self, key):
        return {**os.environ, "E2B_API_URL": self.url, "E2B_SANDBOX_URL": self.url,
                "E2B_API_KEY": key}

    def http(self, method, path, body=None, headers=None, timeout=120):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = dict(headers or {})
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        try:
            try:
                conn.request(method, path, body=body, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                pass
            resp = conn.getresponse()
            return Response(resp.status, dict(resp.getheaders()), resp.read())
        finally:
            conn.close()

    def log_tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def close(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def e2b(daemon):
    if not E2B_BIN.exists():
        pytest.fail(f"{E2B_BIN} does not exist: build it first (make all)", pytrace=False)
    s = E2b(daemon)
    yield s
    s.close()
    # what a failed run left behind
    for state in ("running", "paused"):
        r = daemon.http("GET", f"/v1/sandboxes?state={state}&limit=100&metadata.suite=e2b", unix=True)
        for sbx in r.json().get("sandboxes", []) if r.status == 200 else []:
            daemon.http("DELETE", f"/v1/sandboxes/{sbx['id']}", unix=True)


def run_client(e2b, cmd, key, *which, timeout=600, cwd=None):
    """Runs the client command list cmd (e.g. [python, client.py]) with `which` after it."""
    r = subprocess.run([*cmd, *which], env=e2b.env(key), capture_output=True, text=True,
                       timeout=timeout, cwd=cwd)
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    calls = [row for row in rows if "call" in row]
    failed = [f"{row['call']}: {row['error']}\n{row.get('trace', '')}" for row in calls if not row["ok"]]
    for row in calls:
        print(f"{row['call']}: {'ok' if row['ok'] else 'FAILED'} {row.get('ms', '')}")
    assert calls, f"the client ran no call (exit {r.returncode}):\n{r.stderr[-3000:]}"
    assert not failed, "\n".join(failed) + f"\n--- cpuos-e2b's log:\n{e2b.log_tail()}"
    assert r.returncode == 0, r.stderr[-3000:]
    return calls


@pytest.mark.parametrize("label", ["py-newest", "py-older"])
def test_python_sdk(e2b, daemon, label):
    """Every call of client.py passes under each pinned version."""
    run_client(e2b, [venv(label), str(HERE / "client.py")], daemon.key_a)


@pytest.mark.parametrize("label", ["js-newest", "js-older"])
def test_js_sdk(e2b, daemon, label):
    """Every call of client.mjs passes under each pinned version of the JavaScript SDK."""
    d = node_dir(label)
    run_client(e2b, ["node", "client.mjs"], daemon.key_a, cwd=d)
