"""Idle pauses against a real cpuosd: a sandbox created with an idle timeout pauses itself once no
call, no stream and no port connection was open for that long and its CPU stayed low, and the next
call resumes it; one with an attached stream, an open port connection or a busy CPU does not, until
that ends. The four sandboxes wait side by side, so the module takes about two idle timeouts."""

import http.client
import threading
import time
import urllib.parse

import pytest

import cpuos

pytestmark = pytest.mark.timeout(600)

IDLE = 10  # seconds: the least the daemon takes (two CPU samples)

# Holds each connection, answering nothing (a long poll), until its client leaves.
HOLDER = """
import socket, threading
def hold(c):
    while c.recv(4096):
        pass
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 8000))
s.listen()
open("/tmp/listening", "w").close()
while True:
    threading.Thread(target=hold, args=(s.accept()[0],)).start()
"""


def state(sbx):
    return sbx.info().state  # a GET of the sandbox is not a call on it: it stays idle


def wait_state(sbx, want, within):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if state(sbx) == want:
            return time.monotonic()
        time.sleep(0.5)
    pytest.fail(f"{sbx.id} is {state(sbx)}, not {want}, after {within} s")


def test_idle_pauses_and_what_keeps_a_sandbox_awake(daemon, make_sandbox):
    plain = make_sandbox(template="base", idle_timeout=IDLE)
    streamed = make_sandbox(template="base", idle_timeout=IDLE)
    hog = make_sandbox(template="base", idle_timeout=IDLE)
    served = make_sandbox(template="python", idle_timeout=IDLE)
    assert plain.idle_timeout == IDLE and make_sandbox(template="base").idle_timeout is None

    # An attached stream: a background process's output, read in a thread.
    proc = streamed.exec("sleep 600", background=True)
    resp = streamed.client.open("GET", f"/v1/sandboxes/{streamed.id}/processes/{proc.pid}/stream",
                                timeout=None)
    def read_all():
        try:
            for _ in resp:
                pass
        except cpuos.CpuosError:
            pass  # cut by the test

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    # A busy CPU, with nothing attached.
    spin = hog.exec("while :; do :; done", background=True)
    # A port connection held open.
    served.files.write("/tmp/holder.py", HOLDER)
    served.exec("python3 /tmp/holder.py", background=True)
    deadline = time.monotonic() + 60
    while not served.files.exists("/tmp/listening"):
        assert time.monotonic() < deadline, "the holder did not listen"
        time.sleep(0.2)
    u = urllib.parse.urlsplit(served.url(8000))
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.putrequest("GET", u.path)
    conn.putheader("cpuos-traffic-token", served.traffic_token)
    conn.endheaders()

    t0 = time.monotonic()
    paused_at = wait_state(plain, "paused", IDLE + 30)
    assert paused_at - t0 >= IDLE - 5  # not before its time (it was busy being set up)
    # Long past the timeout, the other three still run.
    while time.monotonic() - t0 < 2 * IDLE + 6:
        time.sleep(1)
    assert [state(s) for s in (streamed, hog, served)] == ["running"] * 3

    # What kept each awake ends: each pauses in its turn.
    resp.abort()
    spin.kill()
    conn.close()
    for sbx in (streamed, hog, served):
        wait_state(sbx, "paused", IDLE + 30)

    # The next call resumes it, with its memory: the stream's process is still there.
    r = streamed.exec("pgrep -x sleep >/dev/null && echo alive")
    assert r.stdout == "alive\n" and state(streamed) == "running"
    assert plain.exec("echo back").stdout == "back\n"


def test_idle_timeout_is_checked(daemon):
    for bad in (5, "9s", 0, "25h", "x"):
        r = daemon.http("POST", "/v1/sandboxes", {"template": "base", "idle_timeout": bad},
                        key=daemon.key_a)
        assert r.status == 422 and "idle_timeout" in r.json()["error"]["message"], (bad, r)
    with pytest.raises(cpuos.BadRequestError):
        cpuos.Sandbox.create(template="base", idle_timeout=3, api_key=daemon.key_a, api_url=daemon.url)
