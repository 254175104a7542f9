"""End-to-end fixtures: a real cpuosd (build/bin/cpuosd) with real microVMs, two API keys; and
cpuos-gateway processes in front of it (start_gateway).

Set CPUOSD_BIN (CPUOS_GATEWAY_BIN) to test another daemon (gateway) binary, CPUOS_KEEP_STATE=1 to
keep their state directories, CPUOS_E2E_PG=1 to run every daemon on PostgreSQL (--database: one
server for the session, scripts/pg.sh, a database of its own per daemon) instead of SQLite."""

import glob
import hashlib
import http.client
import itertools
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sdk" / "python"))  # test the SDK of this tree

import cpuos  # noqa: E402

DAEMON_BIN = Path(os.environ.get("CPUOSD_BIN", ROOT / "build" / "bin" / "cpuosd"))
GATEWAY_BIN = Path(os.environ.get("CPUOS_GATEWAY_BIN", ROOT / "build" / "bin" / "cpuos-gateway"))
GUEST_DIR = Path(os.environ.get("CPUOS_GUEST_DIR", ROOT / "build" / "guest"))
READY_TIMEOUT = 120
# Set by make test-asan / test-tsan: a sanitized daemon is slower and holds
# more memory (TSan most: shadow memory per thread), so bounds on time and
# RSS scale by these factors.
SANITIZER = os.environ.get("CPUOS_SANITIZER") or None
SLOW = {None: 1, "address": 3, "thread": 5}.get(SANITIZER, 3)
MEM = {None: 1, "address": 2, "thread": 8}.get(SANITIZER, 4)
# One hung test fails alone instead of eating the suite's whole budget (tests/run.sh's timeout):
# each test, its fixtures' setup and teardown included, has TEST_TIMEOUT seconds (pytest-timeout,
# Debian's python3-pytest-timeout; --timeout or $PYTEST_TIMEOUT override it, and a test that needs
# more says so with @pytest.mark.timeout). A timed-out test fails with its stack, the next runs.
TEST_TIMEOUT = 600 * SLOW


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if not config.pluginmanager.hasplugin("timeout"):
        raise pytest.UsageError("tests/e2e needs pytest-timeout "
                                "(apt-get install python3-pytest-timeout, or scripts/deps.sh)")
    if config.getoption("timeout", None) is None and not os.environ.get("PYTEST_TIMEOUT"):
        config.option.timeout = TEST_TIMEOUT


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.status} {self.body[:300]!r}>"


# Each daemon gets a network range of its own (/20 blocks of 10.128/9):
# two daemons sharing one would give two host-side veths one address.
_RANGES = itertools.count(random.randrange(2048))
_PG = []  # CPUOS_E2E_PG: the session's server (a PgServer), once started
_PG_DBS = itertools.count()


def _pg_database():
    """A new database on the session's PostgreSQL server (started on first use): its URL."""
    if not _PG:
        _PG.append(PgServer())
    name = f"e2e_{os.getpid()}_{next(_PG_DBS)}"
    _PG[0].query(f"CREATE DATABASE {name}")
    return _PG[0].url.rsplit("/", 1)[0] + "/" + name


_DAEMONS = []


def net_tag(state_dir):
    """The tag cpuosd names its namespaces, links and host table with (net.c)."""
    return hashlib.sha256(state_dir.encode()).hexdigest()[:4]


class Daemon:
    """A cpuosd process: `url`, `socket`, `state_dir`, `key_a` (alice), `key_b` (bob)."""

    def __init__(self, extra_args=()):
        # No warm pool unless a test asks: every daemon of the suite would
        # otherwise keep two python VMs running beside the tests.
        self.extra_args = list(extra_args)
        if not any(str(a).startswith("--pool-python") for a in self.extra_args):
            self.extra_args += ["--pool-python", "0"]
        if not any(str(a).startswith("--net-range") for a in self.extra_args):
            n = next(_RANGES) % 2048
            self.extra_args += ["--net-range", f"10.{128 + n // 16}.{(n % 16) * 16}.0/20"]
        # One uid for the suite's daemons, as before blocks (jail_block): they share the
        # cache's template snapshots, which are that uid's. A test of blocks says "--jail-ids auto".
        if "--jail-ids" not in self.extra_args:
            self.extra_args += ["--jail-ids", "1900000000:65536"]
        elif "auto" in self.extra_args:
            i = self.extra_args.index("--jail-ids")
            del self.extra_args[i:i + 2]
        # Tests reach only what they create: no guest goes out unless it asks.
        if not any(str(a).startswith("--net-default") for a in self.extra_args):
            self.extra_args += ["--net-default", "deny-all"]
        if os.environ.get("CPUOS_E2E_PG") and "--database" not in self.extra_args:
            self.extra_args += ["--database", _pg_database()]
        self.url_port = free_port()
        if not any(str(a).startswith("--url-") for a in self.extra_args):
            self.extra_args += ["--url-listen", f"127.0.0.1:{self.url_port}"]
        _DAEMONS.append(self)
        self.dir = tempfile.mkdtemp(prefix="cpuosd-", dir="/tmp")
        os.chmod(self.dir, 0o711)  # for cpuosd, which gives up root, to reach its state
        self.state_dir = os.path.join(self.dir, "state")
        # a directory the daemon makes, and so owns once it gives up root
        self.socket = os.path.join(self.dir, "run", "cpuosd.sock")
        self.log_path = os.path.join(self.dir, "cpuosd.log")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.key_a = self.key_b = None
        self.headers = {}  # sent with every TCP request (a node's cluster secret)

    def start(self, env=None):
        """Starts cpuosd (with env added to its environment) and waits until it answers."""
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(DAEMON_BIN), "--state-dir", self.state_dir, "--socket", self.socket,
             "--listen", f"127.0.0.1:{self.port}", "--guest-dir", str(GUEST_DIR),
             "--log-level", "info", *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=str(ROOT),
            env={**os.environ, **(_PG[0].env if _PG else {}), **(env or {})})
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"cpuosd exited with {self.proc.returncode} while starting:\n{self.log_tail()}")
            try:
                if self.http("GET", "/v1/health", timeout=5).status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        pytest.fail(f"cpuosd did not answer GET /v1/health within {READY_TIMEOUT}s:\n{self.log_tail()}")

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self, kill=True, env=None):
        """SIGKILL (or SIGTERM with kill=False) the daemon and start it on the same state."""
        self.stop(signal.SIGKILL if kill else signal.SIGTERM)
        self.start(env)

    def log_tail(self, n=60):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return "(no log)"

    def http(self, method, path, body=None, headers=None, key=None, unix=False, timeout=120):
        """One raw request (TCP, or the Unix socket); returns a Response, never raises on status."""
        if unix:
            conn = _UnixConnection(self.socket, timeout)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = {**(self.headers if not unix else {}), **(headers or {})}
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode()
        try:
            try:
                conn.request(method, path, body=body, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the daemon may answer before reading the whole body
            resp = conn.getresponse()
            return Response(resp.status, dict(resp.getheaders()), resp.read())
        finally:
            conn.close()

    def create_key(self, name):
        r = self.http("POST", "/v1/keys", body={"name": name}, unix=True)
        assert r.status == 201, f"POST /v1/keys on the socket: {r}"
        return r.json()["key"]

    def kill_all_sandboxes(self):
        for state in ("running", "paused"):
            self._kill_all(state)

    def _kill_all(self, state):
        cursor = None
        while True:
            path = f"/v1/sandboxes?state={state}&limit=100" + (f"&cursor={cursor}" if cursor else "")
            r = self.http("GET", path, unix=True)
            if r.status != 200:
                return
            page = r.json()
            for s in page.get("sandboxes", []):
                self.http("DELETE", f"/v1/sandboxes/{s['id']}", unix=True)
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def close(self):
        """Kills its sandboxes, stops it and removes its directory (kept with CPUOS_KEEP_STATE)."""
        try:
            if self.proc and self.proc.poll() is None:
                self.kill_all_sandboxes()
        except OSError:
            pass
        self.stop()
        if not os.environ.get("CPUOS_KEEP_STATE"):
            shutil.rmtree(self.dir, ignore_errors=True)


class PgServer:
    """A PostgreSQL server of a module's own (scripts/pg.sh): `url`, `env` (its password), `query`."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="cpuos-pg-", dir="/tmp")
        out = subprocess.run([str(ROOT / "scripts/pg.sh"), "up", self.dir, str(free_port())],
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            pytest.fail(f"scripts/pg.sh up failed: {out.stderr.strip()}", pytrace=False)
        self.env = {}
        for line in out.stdout.splitlines():
            if line.startswith("export ") and "=" in line:
                k, v = line[7:].split("=", 1)
                self.env[k] = v
        self.url = self.env["CPUOS_PG_URL"]

    def query(self, sql):
        out = subprocess.run(["psql", "-X", "-A", "-t", "-c", sql, self.url], capture_output=True,
                             text=True, timeout=60, env={**os.environ, **self.env})
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    def restart(self):
        """Stops the server (fast: its connections cut) and starts it again as it was (its
        output to the log: a server holding the pipe of the call would keep it waiting)."""
        pg_ctl = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))[-1]
        out = subprocess.run(["runuser", "-u", "postgres", "--", pg_ctl, "restart", "-D",
                              os.path.join(self.dir, "data"), "-l", os.path.join(self.dir, "server.log"),
                              "-m", "fast", "-w", "-t", "60"],
                             capture_output=True, text=True, timeout=90)
        assert out.returncode == 0, out.stderr

    def close(self):
        subprocess.run([str(ROOT / "scripts/pg.sh"), "down", self.dir], timeout=60)
        shutil.rmtree(self.dir, ignore_errors=True)


def started_daemon(*args, key="own"):
    """For a fixture of a module's or a test's own: yields a started daemon with key_a, closed
    after it (`yield from started_daemon(...)`)."""
    d = Daemon(extra_args=list(args))
    try:
        d.start()
        d.key_a = d.create_key(key)
        yield d
    finally:
        d.close()


_DAEMON = None


@pytest.fixture(scope="session")
def daemon():
    """The session's cpuosd; also sets CPUOS_API_URL and CPUOS_API_KEY (alice) for the SDK."""
    global _DAEMON
    if not DAEMON_BIN.exists():
        pytest.fail(f"{DAEMON_BIN} does not exist: build the daemon first (make all)", pytrace=False)
    d = Daemon()
    _DAEMON = d
    saved = {k: os.environ.get(k) for k in ("CPUOS_API_URL", "CPUOS_API_KEY")}
    try:
        d.start()
        d.key_a = d.create_key("alice")
        d.key_b = d.create_key("bob")
        os.environ["CPUOS_API_URL"] = d.url
        os.environ["CPUOS_API_KEY"] = d.key_a
        yield d
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        d.close()
        _DAEMON = None


@pytest.fixture(scope="module")
def sandbox(daemon):
    """A python-template sandbox of alice's for the module, killed after it."""
    sbx = cpuos.Sandbox.create(template="python", timeout="30m", api_key=daemon.key_a,
                               api_url=daemon.url, metadata={"fixture": "sandbox"})
    yield sbx
    try:
        sbx.kill()
    except cpuos.CpuosError:
        pass


def sandbox_factory(d):
    """make(template=..., key=..., **create_args) on daemon d; every one is killed after the test."""
    made = []

    def make(template="base", key=None, **kwargs):
        kwargs.setdefault("timeout", "10m")
        sbx = cpuos.Sandbox.create(template=template, api_key=key or d.key_a, api_url=d.url,
                                   **kwargs)
        made.append(sbx)
        return sbx

    yield make
    for sbx in made:
        try:
            sbx.kill()
        except cpuos.CpuosError:
            pass


@pytest.fixture
def make_sandbox(daemon):
    """A factory: make_sandbox(template=..., key=..., **create_args); each is killed after the test."""
    yield from sandbox_factory(daemon)


# QEMU as the host sees it, for tests of what a sandbox's RAM is (test_qemu_builds, test_snapshots).
def qemu_of(d, sbx_id):
    """(pid, argv) of the QEMU whose run directory is the sandbox's."""
    want = os.path.join(d.state_dir, "vms", sbx_id) + "/"
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if os.path.basename(argv[0]).startswith("qemu-system") and any(want in a for a in argv):
            return int(pid), argv
    pytest.fail(f"no QEMU runs {sbx_id}")


def mem_backend(argv):
    return next(a for a in argv if a.startswith("memory-backend-file,"))


def restored_from_snapshot(d, make):
    """A sandbox made by make() whose RAM is a snapshot's file mapped private (not its own), and
    that file's path in QEMU's command line (its link in the run directory): the template's
    snapshot may still be in the making when the first one is created, which then boots."""
    deadline = time.monotonic() + 300 * SLOW
    while time.monotonic() < deadline:
        sbx = make()
        pid, argv = qemu_of(d, sbx.id)
        path = re.search(r"mem-path=([^,]+)", mem_backend(argv)).group(1)
        if "share=off" in mem_backend(argv):
            return sbx, pid, argv, path
        sbx.kill()
        time.sleep(2)
    pytest.fail("no sandbox was restored from a snapshot:\n" + d.log_tail(30))


def mapping_kb(pid, path):
    """{"Rss": KB, "Anonymous": KB} of QEMU's mappings of path: Anonymous is its own pages (the
    guest wrote them), the rest of Rss the file's, which every VM that maps it shares."""
    with open(f"/proc/{pid}/smaps") as f:
        text = f.read()
    kb, inside = {"Rss": 0, "Anonymous": 0}, False
    for line in text.splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            inside = line.rstrip().endswith(" " + path)
        elif inside and line.split(":")[0] in kb:
            kb[line.split(":")[0]] += int(line.split()[1])
    return kb


_GATEWAYS = []


class Gateway:
    """A cpuos-gateway process in front of `upstream_url` (an OpenAI-compatible /v1 URL), running
    tool calls in sandboxes of daemon `d` with alice's cpuos key: `url` (its /v1 base URL), `key_a`
    and `key_b` (two gateway keys), `upstream_key` (what it sends upstream)."""

    def __init__(self, d, upstream_url, *args, cpuos_url=None):
        self.d = d
        self.dir = tempfile.mkdtemp(prefix="cpuos-gateway-", dir="/tmp")
        self.state_dir = os.path.join(self.dir, "state")
        self.log_path = os.path.join(self.dir, "gateway.log")
        self.cpuos_key_file = os.path.join(self.dir, "cpuos.key")
        with open(self.cpuos_key_file, "w") as f:
            f.write(d.key_a + "\n")
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.upstream_key = "upstream-secret-" + os.urandom(4).hex()
        self.args = ["--listen", f"127.0.0.1:{self.port}", "--upstream-url", upstream_url,
                     "--cpuos-url", cpuos_url or d.url, *args]
        self.proc = None
        self.key_a = self.key_b = None
        _GATEWAYS.append(self)

    def run(self, *args, timeout=60):
        """cpuos-gateway ARGS on this gateway's state (the keys subcommand)."""
        return subprocess.run([str(GATEWAY_BIN), *args, "--state-dir", self.state_dir,
                               "--cpuos-url", self.d.url, "--cpuos-key-file", self.cpuos_key_file],
                              capture_output=True, text=True, timeout=timeout)

    def create_key(self, name):
        r = self.run("keys", "create", "--name", name)
        assert r.returncode == 0 and r.stdout.startswith("cgw_"), r
        return r.stdout.strip()

    def start(self):
        if not GATEWAY_BIN.exists():
            pytest.fail(f"{GATEWAY_BIN} does not exist: build it first (make all)", pytrace=False)
        self.key_a, self.key_b = self.create_key("alice"), self.create_key("bob")
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(GATEWAY_BIN), *self.args, "--state-dir", self.state_dir,
             "--cpuos-key-file", self.cpuos_key_file],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, "UPSTREAM_API_KEY": self.upstream_key})
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"cpuos-gateway exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                if self.http("GET", "/health", timeout=5).status == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        pytest.fail(f"cpuos-gateway did not answer GET /health within 30s:\n{self.log_tail()}")

    def http(self, method, path, body=None, key=None, headers=None, timeout=300):
        """One raw request to the gateway (path from the root: /v1/...); a Response."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        hdrs = dict(headers or {})
        if key:
            hdrs["Authorization"] = f"Bearer {key}"
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        try:
            try:
                conn.request(method, path, body=body, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                pass  # it may answer before reading the whole body
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

    def sandboxes(self):
        """The daemon's sandboxes this gateway made (by the key ids in their metadata)."""
        ids = [line.split("\t")[0] for line in self.run("keys", "list").stdout.splitlines()]
        found = []
        for key_id in ids:
            for state in ("running", "paused"):
                r = self.d.http("GET", f"/v1/sandboxes?state={state}&limit=100"
                                f"&metadata.cpuos-gateway-key={key_id}", unix=True)
                found += r.json().get("sandboxes", []) if r.status == 200 else []
        return found

    def close(self):
        """Stops it (SIGTERM), kills the sandboxes it made, removes its directory."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        try:
            for s in self.sandboxes():
                self.d.http("DELETE", f"/v1/sandboxes/{s['id']}", unix=True)
        except OSError:
            pass
        _GATEWAYS.remove(self)
        if not os.environ.get("CPUOS_KEEP_STATE"):
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def start_gateway(daemon):
    """start_gateway(upstream_url, *args, cpuos_url=None): a started Gateway on the session's
    daemon; each is stopped after the test, its sandboxes killed."""
    made = []

    def start(upstream_url, *args, cpuos_url=None):
        g = Gateway(daemon, upstream_url, *args, cpuos_url=cpuos_url)
        made.append(g)
        return g.start()

    yield start
    for g in made:
        g.close()


def remove_networks(d):
    """What cpuosd leaves for its next start: namespaces and its host table."""
    tag = net_tag(d.state_dir)
    if os.path.isdir("/run/netns"):
        for name in os.listdir("/run/netns"):
            if name.startswith(f"cpuos-{tag}-"):
                subprocess.run(["ip", "netns", "delete", name], capture_output=True)
    subprocess.run(["nft", "delete", "table", "inet", f"cpuos_{tag}"], capture_output=True)


def pytest_sessionfinish(session, exitstatus):
    for d in _DAEMONS:
        if d.proc is None or d.proc.poll() is not None:
            remove_networks(d)
    if _PG:
        _PG[0].close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed and _DAEMON is not None:
        report.sections.append(("cpuosd log (last lines)", _DAEMON.log_tail(40)))
    for g in _GATEWAYS if report.failed else ():
        report.sections.append((f"cpuos-gateway log {g.url} (last lines)", g.log_tail(40)))
