"""Terminals against a real cpuosd: `cpuos shell` in a real terminal (tmux) follows its size and
passes the exit code; a process on a pseudo-terminal, through the API and the Python SDK, takes
keystrokes and resizes, gives bytes unchanged, and lives through a pause and resume of its sandbox
with its recent output replayed on reattach; bad sizes and misuse are clear errors."""

import base64
import hashlib
import json
import os
import shlex
import subprocess
import tempfile
import threading
import time
import uuid

import pytest

import cpuos
from test_cpuos_cli import CPUOS

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def term_sbx(daemon):
    sbx = cpuos.Sandbox.create(template="base", timeout="30m", api_key=daemon.key_a, api_url=daemon.url)
    yield sbx
    try:
        sbx.kill()
    except cpuos.CpuosError:
        pass


class Screen:
    """What a terminal's on_data has received, with a wait for some text in it."""

    def __init__(self):
        self.data = bytearray()
        self.cv = threading.Condition()

    def __call__(self, chunk):
        with self.cv:
            self.data += chunk
            self.cv.notify_all()

    def wait_for(self, text, within=60.0):
        want = text.encode() if isinstance(text, str) else text
        deadline = time.monotonic() + within
        with self.cv:
            while want not in self.data:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"{want!r} never came; the terminal showed {bytes(self.data[-600:])!r}")
                self.cv.wait(left)


# ---- cpuos shell, driven through tmux as a user's terminal ----

class Tmux:
    """A tmux server of the test's own (its own socket), one window."""

    def __init__(self, cols, rows):
        self.sock = f"cpuos-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.cols, self.rows = cols, rows

    def run(self, *args, check=True):
        r = subprocess.run(["tmux", "-L", self.sock, "-f", "/dev/null", *args], capture_output=True,
                           text=True, timeout=30)
        if check and r.returncode != 0:
            pytest.fail(f"tmux {' '.join(args)}: {r.stderr.strip()}")
        return r.stdout

    def start(self, command):
        self.run("new-session", "-d", "-x", str(self.cols), "-y", str(self.rows), command)
        self.run("set-option", "-g", "status", "off")

    def screen(self):
        return self.run("capture-pane", "-p", "-J", check=False)

    def wait_screen(self, text, within=60.0):
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if text in self.screen():
                return
            time.sleep(0.2)
        pytest.fail(f"{text!r} never showed in the terminal:\n{self.screen()}")

    def type(self, line):
        self.run("send-keys", "-l", line)
        self.run("send-keys", "Enter")

    def close(self):
        self.run("kill-server", check=False)


def test_cpuos_shell_follows_the_terminal_and_passes_the_exit_code(daemon, term_sbx, tmp_path):
    if not os.path.exists(CPUOS):
        pytest.fail(f"{CPUOS} does not exist: build it first (make all)")
    status = tmp_path / "status"
    # The shell's exit status lands in a file: tmux keeps no exit codes.
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/sh\n"
        f"export CPUOS_API_URL={shlex.quote(daemon.url)} CPUOS_API_KEY={shlex.quote(daemon.key_a)}\n"
        f"{shlex.quote(CPUOS)} shell {term_sbx.id} 2>{shlex.quote(str(tmp_path / 'err'))}\n"
        f"echo $? >{shlex.quote(str(status))}\n"
        "sleep 600\n")
    script.chmod(0o755)
    t = Tmux(100, 30)
    try:
        t.start(str(script))
        t.wait_screen("$")  # bash's prompt of the sandbox's user
        t.type("stty size; echo TERM=$TERM")
        t.wait_screen("TERM=xterm-256color")
        assert "30 100" in t.screen()
        t.run("resize-window", "-x", "120", "-y", "40")
        t.type("clear; stty size")
        t.wait_screen("40 120")
        t.type("exit 3")
        deadline = time.monotonic() + 60
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.exists(), f"cpuos shell did not end; screen:\n{t.screen()}"
        assert status.read_text().strip() == "3", (tmp_path / "err").read_text()
    finally:
        t.close()


def test_cpuos_shell_refuses_what_it_cannot_do(daemon, term_sbx):
    env = dict(os.environ, CPUOS_API_URL=daemon.url, CPUOS_API_KEY=daemon.key_a)
    r = subprocess.run([CPUOS, "shell"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "no sandbox given" in r.stderr
    r = subprocess.run([CPUOS, "shell", "sbx_0000000000000000"], capture_output=True, text=True, env=env,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 125 and r.stderr.count("\n") == 1 and "404" in r.stderr, r.stderr
    # Not a terminal: it still runs the command, at 24x80, and passes its status on.
    r = subprocess.run([CPUOS, "shell", term_sbx.id, "--", "sh", "-c", "stty size; exit 7"],
                       capture_output=True, env=env, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 7 and b"24 80" in r.stdout, r


# ---- the API and the Python SDK ----

def test_pty_gives_bytes_takes_keys_and_resizes(term_sbx):
    screen = Screen()
    h = term_sbx.pty.create(cpuos.PtySize(rows=25, cols=90), on_data=screen,
                            cmd="trap 'echo; echo winch $(stty size)' WINCH; stty size; "
                                "printf 'raw:\\377\\376\\n'; read line; echo got=$line; "
                                "while :; do sleep 0.1; done")
    assert h.pid and h.data.get("pty") is True
    screen.wait_for("25 90\r\n")
    screen.wait_for(b"raw:\xff\xfe\r\n")  # bytes as the program wrote them, not text
    term_sbx.pty.send_stdin(h.pid, "hello\r")
    screen.wait_for("got=hello")
    h.resize(cpuos.PtySize(rows=50, cols=160))
    screen.wait_for("winch 50 160")
    listed = [p for p in term_sbx.processes() if p.pid == h.pid]
    assert listed and listed[0].data.get("pty") is True
    assert term_sbx.pty.kill(h.pid) is True
    r = h.wait(timeout=60)
    assert r.signal == 9 and r.exit_code is None
    with pytest.raises(cpuos.NotFoundError):  # its terminal went with it
        term_sbx.pty.resize(h.pid, cpuos.PtySize(rows=10, cols=10))


def test_pty_lives_through_pause_and_resume(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    first = Screen()
    h = sbx.pty.create(cpuos.PtySize(rows=24, cols=80), on_data=first, cmd=["bash", "--norc", "-i"])
    sbx.pty.send_stdin(h.pid, "X=$((6*7)); echo before-$X\r")
    first.wait_for("before-42")
    sbx.pause()
    assert sbx.info().state == "paused"
    sbx.resume()
    again = Screen()
    h2 = sbx.pty.connect(h.pid, on_data=again)
    again.wait_for("before-42")  # the kept output, replayed
    sbx.pty.send_stdin(h.pid, "echo after-$((X+7))\r")  # the same shell: X is still set
    again.wait_for("after-49")
    sbx.pty.send_stdin(h.pid, "exit 5\r")
    assert h2.wait(timeout=60).exit_code == 5


def test_pty_bad_requests_are_clear_errors(daemon, term_sbx):
    path = f"/v1/sandboxes/{term_sbx.id}"
    for bad in ({"rows": 0, "cols": 80}, {"rows": 24}, {"rows": 24, "cols": 10001}, [24, 80],
                {"rows": "24", "cols": 80}):
        r = daemon.http("POST", path + "/exec", {"cmd": "true", "pty": bad}, key=daemon.key_a)
        assert r.status == 422 and "pty" in r.json()["error"]["message"], (bad, r)
    plain = daemon.http("POST", path + "/exec", {"cmd": "sleep 60", "background": True}, key=daemon.key_a)
    assert plain.status == 201 and plain.json()["pty"] is False
    pid = plain.json()["pid"]
    r = daemon.http("POST", f"{path}/processes/{pid}/resize", {"rows": 24, "cols": 80}, key=daemon.key_a)
    assert r.status == 409 and r.json()["error"]["code"] == "conflict", r
    r = daemon.http("POST", f"{path}/processes/{pid}/resize", {"rows": -1, "cols": 80}, key=daemon.key_a)
    assert r.status == 422, r
    r = daemon.http("POST", f"{path}/processes/999999/resize", {"rows": 24, "cols": 80}, key=daemon.key_a)
    assert r.status == 404, r
    r = daemon.http("POST", f"{path}/processes/{pid}/resize", None, key=daemon.key_a)
    assert r.status == 400, r
    # Another account's key sees no such sandbox.
    r = daemon.http("POST", f"{path}/processes/{pid}/resize", {"rows": 24, "cols": 80}, key=daemon.key_b)
    assert r.status == 404, r
    daemon.http("DELETE", f"{path}/processes/{pid}", key=daemon.key_a)
    # A foreground exec on a terminal: its output is the terminal's, in stdout.
    r = daemon.http("POST", path + "/exec", {"cmd": "test -t 1 && echo on-a-tty", "pty": {"rows": 5, "cols": 20}},
                    key=daemon.key_a)
    assert r.status == 200 and r.json()["stdout"] == "on-a-tty\r\n", r


def test_pty_stream_lines_are_base64(daemon, term_sbx):
    path = f"/v1/sandboxes/{term_sbx.id}"
    r = daemon.http("POST", path + "/exec", {"argv": ["printf", "\\033[1mhi\\n"], "background": True,
                                              "pty": {"rows": 24, "cols": 80}}, key=daemon.key_a)
    assert r.status == 201, r
    s = daemon.http("GET", f"{path}/processes/{r.json()['pid']}/stream", key=daemon.key_a)
    lines = [json.loads(x) for x in s.body.splitlines() if x.strip()]
    assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0
    data = b"".join(base64.b64decode(x["data_base64"]) for x in lines if x["type"] == "pty")
    assert data == b"\x1b[1mhi\r\n" and all(x["type"] in ("pty", "exit") for x in lines)


# ---- WebSocket (a browser's way: xterm.js attaches to it) ----

WS_CLIENT = r"""
// node --experimental-websocket: the WebSocket browsers have (undici's).
const [url] = process.argv.slice(2);
const ws = new WebSocket(url);
ws.binaryType = "arraybuffer";
let out = "", typed = false, exit = null;
const done = (why) => { console.log(JSON.stringify({ out, exit, why })); process.exit(0); };
setTimeout(() => done("timeout"), 60000);
ws.onmessage = (m) => {
  if (typeof m.data === "string") { exit = JSON.parse(m.data); return; }
  out += Buffer.from(m.data).toString("latin1");
  if (!typed && out.includes("ready")) { typed = true; ws.send("hi\r"); }
};
ws.onclose = (e) => done(`close ${e.code}`);
ws.onerror = () => done("error");
"""


def test_pty_over_a_websocket(daemon, term_sbx, tmp_path):
    path = f"/v1/sandboxes/{term_sbx.id}"
    r = daemon.http("POST", path + "/exec", {"cmd": "printf '\\377'; echo ready; read x; echo got-$x; exit 7",
                                              "background": True, "pty": {"rows": 24, "cols": 80}},
                    key=daemon.key_a)
    assert r.status == 201, r
    pid = r.json()["pid"]
    script = tmp_path / "ws.mjs"
    script.write_text(WS_CLIENT)
    url = f"{daemon.url.replace('http://', 'ws://')}{path}/processes/{pid}/ws?access_token={daemon.key_a}"
    res = subprocess.run(["node", "--experimental-websocket", str(script), url], capture_output=True,
                         text=True, timeout=120)
    got = json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else res.stderr
    assert got["why"] == "close 1000", got
    assert "\xff" in got["out"] and "got-hi" in got["out"], got  # bytes as the terminal wrote them
    assert got["exit"] == {"type": "exit", "exit_code": 7, "signal": None, "timed_out": False}, got


def test_websocket_refusals(daemon, term_sbx):
    import base64 as b64
    import socket as sk
    import urllib.parse as up
    path = f"/v1/sandboxes/{term_sbx.id}"
    r = daemon.http("POST", path + "/exec", {"cmd": "sleep 120", "background": True,
                                              "pty": {"rows": 24, "cols": 80}}, key=daemon.key_a)
    pid = r.json()["pid"]
    # Not a handshake; a wrong key in the query; another account's key; no such process.
    r = daemon.http("GET", f"{path}/processes/{pid}/ws", key=daemon.key_a)
    assert r.status == 400 and "WebSocket" in r.json()["error"]["message"], r
    hs = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
          "Sec-WebSocket-Key": b64.b64encode(b"0123456789abcdef").decode()}
    assert daemon.http("GET", f"{path}/processes/{pid}/ws?access_token=cpk_nope", headers=hs).status == 401
    assert daemon.http("GET", f"{path}/processes/{pid}/ws", headers=hs, key=daemon.key_b).status == 404
    assert daemon.http("GET", f"{path}/processes/999999/ws", headers=hs, key=daemon.key_a).status == 404
    # A client frame without a mask breaks the protocol: the server closes with 1002.
    u = up.urlsplit(daemon.url)
    s = sk.create_connection((u.hostname, u.port), timeout=30)
    req = (f"GET {path}/processes/{pid}/ws?access_token={daemon.key_a} HTTP/1.1\r\nHost: x\r\n" +
           "".join(f"{k}: {v}\r\n" for k, v in hs.items()) + "\r\n")
    s.sendall(req.encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += s.recv(4096)
    assert head.startswith(b"HTTP/1.1 101"), head
    expect = b64.b64encode(hashlib.sha1(hs["Sec-WebSocket-Key"].encode() +
                                        b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    assert b"Sec-WebSocket-Accept: " + expect in head and b"Connection: Upgrade\r\n" in head, head
    s.sendall(bytes([0x82, 3]) + b"abc")  # binary, unmasked
    data = head.split(b"\r\n\r\n", 1)[1]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if 0x88 in data and len(data) >= data.index(0x88) + 4:
            break
        chunk = s.recv(4096)
        if not chunk:
            break
        data += chunk
    i = data.index(0x88)
    assert int.from_bytes(data[i + 2:i + 4], "big") == 1002, data[i:]
    s.close()
    daemon.http("DELETE", f"{path}/processes/{pid}", key=daemon.key_a)
