"""cpuosd against a hostile guest: the daemon starts tests/e2e/hostile_qemu.py in QEMU's place, whose
"agent" speaks the real protocol over the real sockets and breaks it on purpose. The daemon must
answer each case with a clear error, keep serving, keep its memory bounded, and never hang."""

import base64
import json
import socket
import time
from pathlib import Path

import pytest

from conftest import MEM, SLOW, Daemon

FAKE = Path(__file__).resolve().parent / "hostile_qemu.py"
RSS_LIMIT_KB = 200 * 1024 * MEM  # the daemon with a few sandboxes sits near 10 MB
ANSWER_S = 3 * SLOW


@pytest.fixture(scope="module")
def hd():
    d = Daemon(extra_args=["--qemu", str(FAKE), "--answer-timeout", str(ANSWER_S),
                            "--template-snapshots", "off"])
    d.start()
    d.key = d.create_key("mallory")
    yield d
    d.close()


@pytest.fixture
def sid(hd):
    r = hd.http("POST", "/v1/sandboxes", body={"template": "base"}, key=hd.key)
    assert r.status == 201, r
    yield r.json()["id"]
    hd.http("DELETE", f"/v1/sandboxes/{r.json()['id']}", key=hd.key)


def rss_kb(d):
    with open(f"/proc/{d.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def check_rss(d, case):
    kb = rss_kb(d)
    print(f"cpuosd RSS after {case}: {kb / 1024:.1f} MiB")
    assert kb < RSS_LIMIT_KB, f"cpuosd RSS {kb} KiB after {case}"


def exec_(d, sid, cmd, http_timeout=60, **body):
    return d.http("POST", f"/v1/sandboxes/{sid}/exec", body={"cmd": cmd, **body}, key=d.key,
                  timeout=http_timeout)


def still_serves(d, sid):
    r = exec_(d, sid, "echo ok")
    assert r.status == 200 and r.json()["stdout"] == "ok\n", r
    assert d.proc.poll() is None


def test_a_well_behaved_exec(hd, sid):
    still_serves(hd, sid)


def test_a_flood_is_kept_to_its_tail(hd, sid):
    r = exec_(hd, sid, "hostile:flood")
    assert r.status == 200, r
    res = r.json()
    assert res["stdout_truncated"] and len(res["stdout"]) == 1 << 20
    check_rss(hd, "32 MiB of output")


def test_output_past_the_credit_window_ends_that_operation(hd, sid):
    # A stream nobody reads: the daemon holds at most the window, and the guest's flood past
    # it ends that stream alone.
    s = socket.create_connection(("127.0.0.1", hd.port))
    body = json.dumps({"cmd": "hostile:flood", "stream": True}).encode()
    s.sendall(f"POST /v1/sandboxes/{sid}/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {hd.key}\r\n"
              f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    s.settimeout(30)
    assert s.recv(12).startswith(b"HTTP/1.1 200")
    time.sleep(3)
    still_serves(hd, sid)
    check_rss(hd, "32 MiB past the window")
    got, t0 = b"", time.monotonic()
    while time.monotonic() - t0 < 30:
        chunk = s.recv(1 << 16)
        if not chunk:
            break
        got += chunk
    s.close()
    assert b'"type":"exit"' not in got, "the cut stream must not look whole"
    assert len(got) < 4 << 20, len(got)
    assert "credit window" in hd.log_tail(200)


def test_a_flood_of_tiny_frames_streams_with_bounded_memory(hd, sid):
    r = hd.http("POST", f"/v1/sandboxes/{sid}/exec", body={"cmd": "hostile:tiny", "stream": True},
                key=hd.key, timeout=120)
    assert r.status == 200, r
    lines = [json.loads(x) for x in r.body.splitlines()]
    data = "".join(x.get("data", "") for x in lines if x["type"] == "stdout")
    assert data == "y" * 200000
    assert lines[-1]["type"] == "exit" and lines[-1]["exit_code"] == 0
    # Frames that queue up while the reader is busy share a line: fewer lines than frames
    # (how many fewer depends on how fast this test reads).
    assert len(lines) < 200000, len(lines)
    print(f"200000 one-byte frames came as {len(lines)} lines")
    r = exec_(hd, sid, "hostile:tiny", http_timeout=120)
    assert r.status == 200 and r.json()["stdout"] == "y" * 200000
    check_rss(hd, "200000 one-byte frames")


def test_a_listing_past_the_cap_is_refused(hd, sid):
    t0 = time.monotonic()
    r = hd.http("GET", f"/v1/sandboxes/{sid}/files/list?path=/", key=hd.key)
    assert r.status in (413, 503) and "error" in r.json(), r
    print(f"250000 entries refused with {r.status} in {time.monotonic() - t0:.1f}s")
    still_serves(hd, sid)
    check_rss(hd, "a listing of 250000 entries")


def test_a_request_the_guest_never_answers_is_a_504(hd, sid):
    t0 = time.monotonic()
    r = hd.http("GET", f"/v1/sandboxes/{sid}/files/stat?path=/x", key=hd.key)
    took = time.monotonic() - t0
    assert r.status == 504 and r.json()["error"]["code"] == "timeout", r
    assert ANSWER_S - 0.5 < took < ANSWER_S + 7 * SLOW, took
    t0 = time.monotonic()
    r = exec_(hd, sid, "hostile:silent", timeout="1s")
    assert r.status == 504, r
    assert time.monotonic() - t0 < 1 + ANSWER_S + 7 * SLOW
    still_serves(hd, sid)


def test_a_broken_channel_is_made_anew(hd, sid):
    r = exec_(hd, sid, "hostile:garbage")
    assert r.status == 503, r
    deadline = time.monotonic() + 15
    while True:
        r = exec_(hd, sid, "echo ok")
        if r.status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status == 200 and r.json()["stdout"] == "ok\n", r


def test_answers_without_a_process_id(hd, sid):
    # A background start and stdin channels answered without A_PROC, the end close behind.
    for _ in range(20):
        r = exec_(hd, sid, "hostile:noproc", background=True, stdin="x")
        assert r.status in (201, 503), r
        r = hd.http("POST", f"/v1/sandboxes/{sid}/processes/7/stdin", body=b"data", key=hd.key)
        assert r.status in (404, 503), r
    still_serves(hd, sid)


def test_a_console_flood_is_capped(hd, sid):
    r = exec_(hd, sid, "hostile:console", http_timeout=120)
    assert r.status == 200, r
    log = Path(hd.state_dir) / "vms" / sid / "console.log"
    assert log.stat().st_size < 2 * 1024 * 1024
    check_rss(hd, "64 MiB of console output")


def test_binary_stdin_is_checked(hd, sid):
    r = exec_(hd, sid, "echo ok", stdin_base64="not base64!")
    assert r.status == 422, r
    r = exec_(hd, sid, "echo ok", stdin="a", stdin_base64=base64.b64encode(b"a").decode())
    assert r.status == 422, r
    r = exec_(hd, sid, "echo ok", stdin_base64=base64.b64encode(b"\0\xff").decode())
    assert r.status == 200, r
