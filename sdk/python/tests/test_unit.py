"""SDK pieces that need no daemon: durations, URLs, errors, result parsing, request bodies, the
transport, paging, exec streams, pause/resume/fork, checkpoints and usage against a local fake of
the daemon's HTTP side; and mypy --strict over the SDK. tests/e2e holds what needs a real cpuosd."""

import base64
import datetime
import io
import json
import os
import textwrap
import threading
import time
import urllib.parse

import pytest

import cpuos
from cpuos import _client, process
from cpuos.errors import error_from_response
from fake_daemon import FakeDaemon
from fake_openai import FakeOpenAI


def test_durations():
    assert _client.duration("2m") == "2m" and _client.duration(" 1h30m ") == "1h30m"
    assert _client.duration(90) == 90 and _client.duration(1.2) == 2 and _client.duration(None) is None
    assert _client.duration_query(30) == "30s" and _client.duration_query("5m") == "5m"
    assert [_client.seconds(v) for v in ("90s", "30m", "2h", "1h30m", "45", 7)] == \
        [90, 1800, 7200, 5400, 45, 7]
    assert _client.seconds("soon") is None and _client.seconds("") is None
    with pytest.raises(TypeError):
        _client.duration(True)


def test_url_resolution(monkeypatch):
    monkeypatch.delenv("CPUOS_API_URL", raising=False)
    monkeypatch.delenv("CPUOS_API_KEY", raising=False)
    monkeypatch.setattr(_client, "DEFAULT_SOCKET", "/nonexistent/cpuosd.sock")
    assert _client.Client().api_url == "http://127.0.0.1:7070"
    monkeypatch.setattr(_client, "DEFAULT_SOCKET", os.devnull)  # exists: the local administrator
    assert _client.Client().api_url == "unix://" + os.devnull
    assert _client.Client(api_key="k").api_url == "http://127.0.0.1:7070"
    monkeypatch.setenv("CPUOS_API_URL", "http://10.0.0.5:8080/v1/")
    monkeypatch.setenv("CPUOS_API_KEY", "cpuos_env")
    c = _client.Client()
    assert (c.api_key, c._host, c._port, c._prefix) == ("cpuos_env", "10.0.0.5", 8080, "")
    c = _client.Client(api_key="cpuos_arg", api_url="unix:///run/x.sock")
    assert (c.api_key, c._socket_path) == ("cpuos_arg", "/run/x.sock")
    with pytest.raises(ValueError):
        _client.Client(api_url="ftp://host")


def test_errors_from_responses():
    body = b'{"error": {"code": "not_found", "message": "no sandbox sbx_1"}}'
    e = error_from_response(404, body)
    assert isinstance(e, cpuos.NotFoundError)
    assert (e.status, e.code, e.message) == (404, "not_found", "no sandbox sbx_1")
    for status, cls in ((400, cpuos.BadRequestError), (401, cpuos.AuthenticationError),
                        (409, cpuos.ConflictError), (413, cpuos.BadRequestError),
                        (422, cpuos.BadRequestError), (429, cpuos.QuotaError),
                        (500, cpuos.SandboxError), (503, cpuos.SandboxError),
                        (418, cpuos.BadRequestError)):
        assert type(error_from_response(status, b"not json")) is cls
    assert error_from_response(502, b"").message == "HTTP 502"
    t = cpuos.TimeoutError("slow", result=cpuos.ExecResult(exit_code=None, timed_out=True))
    assert isinstance(t, TimeoutError) and isinstance(t, cpuos.CpuosError) and t.result.timed_out


def test_results_and_entries_from_json():
    r = cpuos.ExecResult.from_json({"exit_code": None, "signal": 9, "timed_out": True, "stdout": "x",
                                    "stderr": None, "duration_ms": 5, "future_field": 1})
    assert (r.exit_code, r.signal, r.timed_out, r.stdout, r.stderr) == (None, 9, True, "x", "")
    e = cpuos.Entry.from_json({"path": "/work/l", "name": "l", "type": "symlink", "target": "/x",
                               "size": 2, "extra": True})
    assert (e.path, e.type, e.target, e.is_dir) == ("/work/l", "symlink", "/x", False)


def test_request_bodies(tmp_path):
    assert _client._body_and_length("é") == (b"\xc3\xa9", 2)
    f = io.BytesIO(b"abcdef")
    f.read(2)
    assert _client._body_and_length(f)[1] == 4
    p = tmp_path / "f"
    p.write_bytes(b"x" * 1000)
    with open(p, "rb") as fh:
        assert _client._body_and_length(fh)[1] == 1000
    r, w = os.pipe()
    with os.fdopen(r, "rb") as pipe:
        os.close(w)
        assert _client._body_and_length(pipe)[1] is None  # chunked
    body, length = _client._body_and_length(iter([b"a", "", "b"]))
    assert length is None and list(body) == [b"a", b"b"]
    with pytest.raises(TypeError):
        _client._body_and_length(12)


# Transport, paging, exec streams and stdin against a local fake of the daemon (tests/e2e/fake_daemon.py).
# The fake is a test double of the HTTP side only: it checks what the client sends and how it reuses
# connections.

@pytest.fixture
def fake():
    f = FakeDaemon()
    yield f
    f.close()
    # Sandbox handles share a Client per URL: a later fake may get this port again.
    for c in _client._SHARED.values():
        c.close()
    _client._SHARED.clear()


def _sandbox(fake):
    return cpuos.Sandbox("sbx_1", api_key="cpuos_test", api_url=fake.url)


EXEC = "/v1/sandboxes/sbx_1/exec"
FILES = "/v1/sandboxes/sbx_1/files"
RESULT = {"exit_code": 0, "stdout": "", "stderr": "", "signal": None, "timed_out": False,
          "duration_ms": 3}


def test_keep_alive_reuses_one_connection(fake):
    fake.routes[("GET", "/v1/sandboxes/sbx_1")] = lambda h, q, b: h.send_json(200, {"id": "sbx_1"})
    sbx = _sandbox(fake)
    for _ in range(10):
        assert sbx.info().id == "sbx_1"
    with pytest.raises(cpuos.NotFoundError):  # an error answer read to its end keeps it too
        sbx.process(7)
    stats = sbx.client.pool_stats()
    assert (fake.connections, stats.opened, stats.reused, stats.idle) == (1, 1, 10, 1)
    sbx.client.close()
    assert sbx.client.pool_stats().idle == 0


def test_sandbox_handles_share_a_client(fake):
    fake.routes[("GET", "/v1/sandboxes/sbx_1")] = lambda h, q, b: h.send_json(200, {"id": "sbx_1"})
    handles = [_sandbox(fake) for _ in range(20)]
    for sbx in handles:
        sbx.info()
    assert all(s.client is handles[0].client for s in handles)
    assert (fake.connections, handles[0].client.pool_stats().idle) == (1, 1)
    other = cpuos.Sandbox("sbx_1", api_key="cpuos_other", api_url=fake.url)
    assert other.client is not handles[0].client and other.client.api_key == "cpuos_other"


def test_keep_alive_over_a_unix_socket(tmp_path):
    f = FakeDaemon(unix_path=str(tmp_path / "d.sock"))
    try:
        f.routes[("GET", "/v1/health")] = lambda h, q, b: h.send_json(200, {"status": "ok"})
        c = _client.Client(api_url=f.url)
        assert [c.request("GET", "/v1/health")["status"] for _ in range(5)] == ["ok"] * 5
        assert (f.connections, c.pool_stats().opened) == (1, 1)
    finally:
        f.close()


def test_pool_is_shared_by_threads_and_capped(fake):
    gate = threading.Barrier(12)
    fake.routes[("GET", "/v1/health")] = lambda h, q, b: h.send_json(200, {"ok": True})
    c = _client.Client(api_url=fake.url, max_idle=8)
    errors = []

    def worker():
        try:
            gate.wait(10)
            for _ in range(20):
                assert c.request("GET", "/v1/health") == {"ok": True}
        except Exception as e:  # reported below: an assert in a thread would be lost
            errors.append(e)

    threads = [threading.Thread(target=worker) for _ in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    stats = c.pool_stats()
    assert errors == [] and len(fake.requests) == 240
    assert stats.opened <= 40 and stats.reused >= 200 and stats.idle <= 8
    assert stats.opened == fake.connections


def test_partly_read_stream_closes_its_connection(fake):
    data = bytes(range(256)) * 1024
    fake.routes[("GET", FILES)] = lambda h, q, b: h.send_bytes(data)
    files = _sandbox(fake).files
    client = files._sandbox.client
    assert files.read("/work/f") == data  # read to the end: pooled
    assert client.pool_stats().idle == 1
    stream = files.read_stream("/work/f", chunk_size=1000)
    assert len(next(stream)) <= 1000
    stream.close()  # stopped early: the rest is unread, so the connection must not be reused
    assert client.pool_stats().idle == 0
    assert files.read("/work/f") == data
    assert (client.pool_stats().opened, fake.connections) == (2, 2)


def test_server_closed_idle_connection_is_not_used(fake):
    fake.routes[("GET", "/v1/health")] = lambda h, q, b: h.send_json(200, {}, drop_after=True)
    c = _client.Client(api_url=fake.url)
    c.request("GET", "/v1/health")
    time.sleep(0.2)  # let the fake's close arrive
    c.request("GET", "/v1/health")
    stats = c.pool_stats()
    assert (stats.opened, stats.reused, stats.retried) == (2, 0, 0)


def test_stale_reused_connection_is_retried_once(fake, monkeypatch):
    # The race the idle check cannot see: the server closes just after the check.
    fake.routes[("POST", "/v1/echo")] = lambda h, q, b: h.send_json(200, b, drop_after=True)
    monkeypatch.setattr(_client, "_dropped", lambda conn: False)
    c = _client.Client(api_url=fake.url)
    assert c.request("POST", "/v1/echo", json_body={"n": 1}) == {"n": 1}
    time.sleep(0.2)
    assert c.request("POST", "/v1/echo", json_body={"n": 2}) == {"n": 2}
    stats = c.pool_stats()
    assert (stats.opened, stats.reused, stats.retried) == (2, 1, 1)
    assert fake.bodies("POST", "/v1/echo") == [{"n": 1}, {"n": 2}]  # each sent and run once


def test_streamed_body_is_never_sent_on_a_reused_connection(fake, monkeypatch):
    fake.routes[("PUT", FILES)] = lambda h, q, b: h.send_json(201, {"path": q["path"], "size": len(b)},
                                                               drop_after=True)
    monkeypatch.setattr(_client, "_dropped", lambda conn: False)
    files = _sandbox(fake).files
    assert files.write("/work/a", b"abc").size == 3
    time.sleep(0.2)
    # An iterator cannot be sent twice: it gets a new connection rather than risk a stale one.
    assert files.write("/work/b", iter([b"x" * 10, b"y" * 5])).size == 15
    stats = files._sandbox.client.pool_stats()
    assert (stats.opened, stats.reused, stats.retried) == (2, 0, 0)
    assert fake.bodies("PUT", FILES) == [b"abc", b"x" * 10 + b"y" * 5]


def _list_route(fake, total, key="cpuos_test"):
    """GET /v1/sandboxes over `total` sandboxes; the queries it got are in `fake.list_queries`."""
    ids = [f"sbx_{i:02d}" for i in range(total)]
    fake.list_queries = []

    def route(h, q, b):
        fake.list_queries.append(q)
        if h.headers.get("Authorization") != f"Bearer {key}":
            return h.send_json(401, {"error": {"code": "unauthorized", "message": "bad key"}})
        start, limit = int(q.get("cursor", 0)), int(q.get("limit", 50))
        page = ids[start:start + limit]
        more = start + limit < total
        h.send_json(200, {"sandboxes": [{"id": i, "state": "running"} for i in page],
                          "next_cursor": str(start + limit) if more else None})

    fake.routes[("GET", "/v1/sandboxes")] = route
    return ids


def test_list_fetches_pages_only_when_reached(fake):
    ids = _list_route(fake, 5)
    it = cpuos.Sandbox.list(page_size=2, api_key="cpuos_test", api_url=fake.url)
    assert isinstance(it, cpuos.SandboxPaginator)
    assert (it.pages_fetched, len(fake.requests)) == (1, 1)
    first = [next(it).id, next(it).id]
    assert first == ids[:2] and len(fake.requests) == 1  # the first page is used up, not more
    assert next(it).id == ids[2] and len(fake.requests) == 2
    assert [s.id for s in it] == ids[3:] and it.pages_fetched == 3
    assert list(it) == []  # an iterator: once
    assert fake.connections == 1  # the pages share the paginator's client and its connection
    listed = cpuos.Sandbox.list(page_size=2, api_key="cpuos_test", api_url=fake.url)
    assert all(s.client is listed._client for s in listed)


def test_list_pages_and_filters(fake):
    ids = _list_route(fake, 5)
    it = cpuos.Sandbox.list(state="running", metadata={"suite": "x y"}, page_size=2,
                            api_key="cpuos_test", api_url=fake.url)
    assert next(it).id == ids[0]
    assert [[s.id for s in page] for page in it.pages()] == [ids[1:2], ids[2:4], ids[4:]]
    query = {"state": "running", "metadata.suite": "x y", "limit": "2"}
    assert fake.list_queries == [query, dict(query, cursor="2"), dict(query, cursor="4")]
    assert list(cpuos.Sandbox.list(api_key="cpuos_test", api_url=fake.url).pages()) != []
    assert fake.list_queries[-1] == {}


def test_list_raises_at_the_call_for_a_wrong_key(fake):
    _list_route(fake, 3)
    with pytest.raises(cpuos.AuthenticationError):
        cpuos.Sandbox.list(api_key="cpuos_wrong", api_url=fake.url)


def _exec_route(fake, answer):
    fake.routes[("POST", EXEC)] = answer


def test_stdin_text_and_bytes_bodies(fake):
    _exec_route(fake, lambda h, q, b: h.send_json(200, RESULT))
    sbx = _sandbox(fake)
    blob = b"\x00\xff\xfe binary \x80\n" + bytes(range(256))
    sbx.exec("cat", stdin="text é")
    sbx.exec("cat", stdin=blob)
    sbx.exec("cat", stdin=bytearray(b"\x00\x01"))
    sbx.exec(["cat"], stdin=memoryview(b"\xffmv"))
    sbx.exec("true")
    text, raw, arr, mv, none = fake.bodies("POST", EXEC)
    assert text == {"cmd": "cat", "stdin": "text é"}
    assert "stdin" not in raw and base64.b64decode(raw["stdin_base64"], validate=True) == blob
    assert base64.b64decode(arr["stdin_base64"]) == b"\x00\x01" and "stdin" not in arr
    assert mv == {"argv": ["cat"], "stdin_base64": base64.b64encode(b"\xffmv").decode()}
    assert none == {"cmd": "true"}
    assert "stream" not in text  # no callbacks: the plain JSON answer


def test_exec_callbacks_get_chunks_as_they_come(fake):
    arrived = threading.Event()
    waited = []

    def answer(h, q, b):
        h.send_ndjson([
            {"type": "stdout", "data": "one\n"},
            # The rest only after the client has called back for the first chunk (or 5 s).
            lambda: waited.append(arrived.wait(5)),
            {"type": "stderr", "data": "warn\n"},
            {"type": "stdout", "data": "two\n"},
            {"type": "progress", "data": "a later event type"},
            {"type": "exit", "exit_code": 3, "signal": None, "timed_out": False, "duration_ms": 812},
        ])

    _exec_route(fake, answer)
    out, err = [], []

    def on_out(text):
        out.append(text)
        arrived.set()

    r = _sandbox(fake).exec("x", on_stdout=on_out, on_stderr=err.append)
    assert waited == [True]
    assert (out, err) == (["one\n", "two\n"], ["warn\n"])
    assert (r.exit_code, r.stdout, r.stderr, r.signal, r.duration_ms) == (3, "one\ntwo\n", "warn\n",
                                                                          None, 812)
    assert fake.bodies("POST", EXEC) == [{"cmd": "x", "stream": True}]


def test_exec_stream_reuses_its_connection(fake):
    _exec_route(fake, lambda h, q, b: h.send_ndjson([
        {"type": "stdout", "data": "x"}, {"type": "exit", "exit_code": 0}]))
    sbx = _sandbox(fake)
    for _ in range(3):
        assert sbx.exec("x", on_stdout=lambda t: None).stdout == "x"
    assert (fake.connections, sbx.client.pool_stats().reused) == (1, 2)


def test_exec_stream_timeout_raises_with_the_partial_result(fake):
    _exec_route(fake, lambda h, q, b: h.send_ndjson([
        {"type": "stdout", "data": "started\n"},
        {"type": "exit", "exit_code": None, "signal": 9, "timed_out": True, "duration_ms": 1000}]))
    got = []
    with pytest.raises(cpuos.TimeoutError) as e:
        _sandbox(fake).exec("sleep 9", timeout="1s", on_stdout=got.append)
    assert got == ["started\n"]
    partial = e.value.result
    assert (partial.stdout, partial.signal, partial.timed_out) == ("started\n", 9, True)
    assert fake.bodies("POST", EXEC)[0]["timeout"] == "1s"


def test_exec_stream_without_exit_is_an_error(fake):
    _exec_route(fake, lambda h, q, b: h.send_ndjson([{"type": "stdout", "data": "half"}]))
    got = []
    with pytest.raises(cpuos.CpuosError, match="without an exit line"):
        _sandbox(fake).exec("x", on_stdout=got.append)
    assert got == ["half"]


def test_process_stream_cut_short_is_an_error(fake):
    # A stream whose connection is cut (an API replica gone) ends as a clean end would.
    fake.routes[("GET", "/v1/sandboxes/sbx_1/processes/7/stream")] = \
        lambda h, q, b: h.send_ndjson([{"type": "stdout", "data": "half"}])
    p = cpuos.Process(_sandbox(fake), {"pid": 7, "state": "running"})
    got = []
    with pytest.raises(cpuos.CpuosError, match="without an exit line"):
        for kind, text in p.stream():
            got.append(text)
    assert got == ["half"]


def test_exec_stream_bad_line_is_an_error(fake):
    def answer(h, q, b):
        h.send_response(200)
        h.send_header("Content-Type", "application/x-ndjson")
        h.send_header("Content-Length", "9")
        h.end_headers()
        h.wfile.write(b"not json\n")

    _exec_route(fake, answer)
    with pytest.raises(cpuos.CpuosError, match="invalid JSON"):
        _sandbox(fake).exec("x", on_stderr=lambda t: None)


def test_exec_callbacks_with_a_daemon_that_ignores_stream(fake):
    _exec_route(fake, lambda h, q, b: h.send_json(200, dict(RESULT, stdout="all\nat once\n",
                                                            stderr="", exit_code=1)))
    out, err = [], []
    r = _sandbox(fake).exec("x", on_stdout=out.append, on_stderr=err.append)
    assert (out, err, r.exit_code, r.stdout) == (["all\nat once\n"], [], 1, "all\nat once\n")


def test_exec_callbacks_are_for_foreground_only(fake):
    with pytest.raises(ValueError):
        _sandbox(fake).exec("x", background=True, on_stdout=print)
    assert fake.requests == []


def test_tail_keeps_the_end():
    t = process.Tail(cap=10)
    for i in range(100):
        t.add(str(i % 10))
    assert (t.text(), t.truncated) == ("0123456789", True)
    short = process.Tail(cap=10)
    short.add("abc")
    assert (short.text(), short.truncated) == ("abc", False)
    chunks = process.Tail(cap=10)
    for piece in ("abcd", "efgh", "ijkl", "mnop", "qrst", "uvwx"):
        chunks.add(piece)
    assert (chunks.chunks(), chunks.truncated) == (["op", "qrst", "uvwx"], True)


def test_package_ships_py_typed():
    pkg = os.path.dirname(cpuos.__file__)
    assert os.path.isfile(os.path.join(pkg, "py.typed"))
    with open(os.path.join(pkg, "..", "pyproject.toml")) as f:
        assert 'cpuos = ["py.typed"]' in f.read()


# Pause, resume, fork, checkpoints and usage: the requests the SDK sends and how it reads the
# answers, against the fake.

SBX = "/v1/sandboxes/sbx_1"
SESSION = "ses_00112233445566ff"
CKP = {"id": "ckp_0123456789abcdef", "name": "step-3", "sandbox_id": "sbx_1", "template": "python",
       "vcpus": 1, "memory_mb": 512, "disk_mb": 2048, "size_bytes": 123,
       "created_at": "2026-11-29T09:41:58Z", "future_field": [1]}


def _sbx_obj(sid="sbx_1", state="running", **extra):
    obj = {"id": sid, "template": "python", "state": state, "vcpus": 1, "memory_mb": 512,
           "disk_mb": 2048, "created_at": "2026-11-29T09:41:58Z",
           "expires_at": "2026-11-29T10:11:58Z", "metadata": {}, "end_reason": None,
           "session_id": SESSION, "on_timeout": "pause", "paused_at": None, "parent": None}
    obj.update(extra)
    return obj


def _error(h, status, code, message):
    h.send_json(status, {"error": {"code": code, "message": message}})


def test_pause_returns_the_session_and_updates_the_handle(fake):
    fake.routes[("POST", SBX + "/pause")] = lambda h, q, b: h.send_json(
        200, _sbx_obj(state="paused", paused_at="2026-11-29T09:50:00Z"))
    sbx = _sandbox(fake)
    assert sbx.pause() == SESSION
    assert (sbx.state, sbx.session_id, sbx.paused_at, sbx.on_timeout) == (
        "paused", SESSION, "2026-11-29T09:50:00Z", "pause")
    assert sbx.pause() == SESSION  # pausing a paused sandbox is the same answer
    assert fake.requests == [("POST", SBX + "/pause", b"")] * 2  # no body


def test_pause_errors(fake):
    answers = iter([lambda h: _error(h, 409, "conflict", "sandbox sbx_1 is stopped"),
                    lambda h: _error(h, 404, "not_found", "no sandbox sbx_1"),
                    lambda h: h.send_json(200, _sbx_obj(state="paused", session_id=None))])
    fake.routes[("POST", SBX + "/pause")] = lambda h, q, b: next(answers)(h)
    sbx = _sandbox(fake)
    with pytest.raises(cpuos.ConflictError) as e:
        sbx.pause()
    assert (e.value.status, e.value.code) == (409, "conflict")
    with pytest.raises(cpuos.NotFoundError):
        sbx.pause()
    with pytest.raises(cpuos.CpuosError, match="no session id"):
        sbx.pause()


def test_resume_on_an_instance(fake):
    fake.routes[("POST", SBX + "/resume")] = lambda h, q, b: h.send_json(200, _sbx_obj())
    sbx = cpuos.Sandbox(api_key="cpuos_test", api_url=fake.url,
                        _data=_sbx_obj(state="paused", paused_at="2026-11-29T09:50:00Z"))
    assert sbx.resume() is sbx
    assert (sbx.state, sbx.paused_at, sbx.session_id) == ("running", None, SESSION)
    assert fake.requests == [("POST", SBX + "/resume", b"")]


def test_resume_by_session_on_the_class(fake):
    fake.routes[("POST", f"/v1/sandboxes/{SESSION}/resume")] = lambda h, q, b: h.send_json(
        200, _sbx_obj())
    fake.routes[("POST", SBX + "/resume")] = lambda h, q, b: h.send_json(200, _sbx_obj())
    sbx = cpuos.Sandbox.resume(SESSION, api_key="cpuos_test", api_url=fake.url)
    assert isinstance(sbx, cpuos.Sandbox)
    assert (sbx.id, sbx.state, sbx.session_id) == ("sbx_1", "running", SESSION)
    assert sbx.client is _sandbox(fake).client  # the shared Client of this daemon and key
    assert cpuos.Sandbox.resume("sbx_1", api_key="cpuos_test", api_url=fake.url).id == "sbx_1"
    assert [p for _, p, _ in fake.requests] == [f"/v1/sandboxes/{SESSION}/resume", SBX + "/resume"]

    class Mine(cpuos.Sandbox):
        pass

    assert type(Mine.resume(SESSION, api_key="cpuos_test", api_url=fake.url)) is Mine


def test_resume_by_session_uses_the_environment(fake, monkeypatch):
    seen = []

    def answer(h, q, b):
        seen.append(h.headers.get("Authorization"))
        h.send_json(200, _sbx_obj())

    fake.routes[("POST", f"/v1/sandboxes/{SESSION}/resume")] = answer
    monkeypatch.setenv("CPUOS_API_URL", fake.url)
    monkeypatch.setenv("CPUOS_API_KEY", "cpuos_env")
    assert cpuos.Sandbox.resume(SESSION).id == "sbx_1"
    assert seen == ["Bearer cpuos_env"]


def test_resume_errors_and_odd_ids(fake):
    fake.routes[("POST", "/v1/sandboxes/ses_gone/resume")] = lambda h, q, b: _error(
        h, 404, "not_found", "no session ses_gone")
    fake.routes[("POST", SBX + "/resume")] = lambda h, q, b: _error(
        h, 409, "conflict", "sandbox sbx_1 is stopped")
    with pytest.raises(cpuos.NotFoundError) as e:
        cpuos.Sandbox.resume("ses_gone", api_key="cpuos_test", api_url=fake.url)
    assert e.value.message == "no session ses_gone"
    with pytest.raises(cpuos.ConflictError):
        _sandbox(fake).resume()
    # A session id is user data: it stays one path segment, whatever it holds.
    with pytest.raises(cpuos.NotFoundError):
        cpuos.Sandbox.resume("../keys?x=1", api_key="cpuos_test", api_url=fake.url)
    assert fake.requests[-1][1] == "/v1/sandboxes/..%2Fkeys%3Fx%3D1/resume"
    with pytest.raises(ValueError):
        cpuos.Sandbox.resume("", api_key="cpuos_test", api_url=fake.url)


def test_fork(fake):
    def answer(h, q, b):
        n = b.get("count", 1)
        h.send_json(201, {"sandboxes": [_sbx_obj(f"sbx_{i + 2}", parent="sbx_1",
                                                 session_id=f"ses_{i + 2:016x}")
                                        for i in range(n)]})

    fake.routes[("POST", SBX + "/fork")] = answer
    sbx = _sandbox(fake)
    forks = sbx.fork(2)
    assert [(f.id, f.parent, f.state) for f in forks] == [("sbx_2", "sbx_1", "running"),
                                                          ("sbx_3", "sbx_1", "running")]
    assert all(isinstance(f, cpuos.Sandbox) and f.client is sbx.client for f in forks)
    assert forks[1].session_id == "ses_0000000000000003"
    assert [f.id for f in sbx.fork()] == ["sbx_2"]
    assert fake.bodies("POST", SBX + "/fork") == [{"count": 2}, {"count": 1}]


def test_fork_errors(fake):
    answers = iter([lambda h: _error(h, 422, "invalid_argument", "count must be 1..16"),
                    lambda h: _error(h, 429, "quota_exceeded", "too many sandboxes"),
                    lambda h: _error(h, 409, "conflict", "sandbox sbx_1 is stopped")])
    fake.routes[("POST", SBX + "/fork")] = lambda h, q, b: next(answers)(h)
    sbx = _sandbox(fake)
    with pytest.raises(cpuos.BadRequestError):
        sbx.fork(17)
    with pytest.raises(cpuos.QuotaError):
        sbx.fork(16)
    with pytest.raises(cpuos.ConflictError):
        sbx.fork()
    assert fake.bodies("POST", SBX + "/fork") == [{"count": 17}, {"count": 16}, {"count": 1}]


def test_checkpoint_of_a_sandbox(fake):
    names = set()

    def answer(h, q, b):
        if b["name"] in names:
            return _error(h, 409, "conflict", f"checkpoint '{b['name']}' exists")
        names.add(b["name"])
        h.send_json(201, CKP)

    fake.routes[("POST", SBX + "/checkpoints")] = answer
    sbx = _sandbox(fake)
    ckp = sbx.checkpoint("step-3")
    assert isinstance(ckp, cpuos.Checkpoint)
    assert (ckp.id, ckp.name, ckp.sandbox_id, ckp.template, ckp.size_bytes, ckp.created_at) == (
        CKP["id"], "step-3", "sbx_1", "python", 123, "2026-11-29T09:41:58Z")
    assert (ckp.vcpus, ckp.memory_mb, ckp.disk_mb, ckp.data["future_field"]) == (1, 512, 2048, [1])
    with pytest.raises(cpuos.ConflictError, match="exists"):
        sbx.checkpoint("step-3")
    assert fake.bodies("POST", SBX + "/checkpoints") == [{"name": "step-3"}] * 2


def test_checkpoints_list_get_delete(fake):
    older = dict(CKP, id="ckp_00000000000000aa", name="step-1", created_at="2026-11-29T09:00:00Z")
    store = {CKP["id"]: CKP, older["id"]: older}

    def find(h):
        key = urllib.parse.unquote(urllib.parse.urlsplit(h.path).path.rsplit("/", 1)[1])
        return next((c for c in store.values() if key in (c["id"], c["name"])), None)

    def get(h, q, b):
        c = find(h)
        if c is None:
            return _error(h, 404, "not_found", "no such checkpoint")
        h.send_json(200, c)

    def delete(h, q, b):
        c = find(h)
        if c is None:
            return _error(h, 404, "not_found", "no such checkpoint")
        del store[c["id"]]
        h.send_empty(204)

    fake.routes[("GET", "/v1/checkpoints")] = lambda h, q, b: h.send_json(
        200, {"checkpoints": sorted(store.values(), key=lambda c: c["created_at"], reverse=True)})
    for path in (f"/v1/checkpoints/{CKP['id']}", "/v1/checkpoints/step-3",
                 f"/v1/checkpoints/{older['id']}", "/v1/checkpoints/step-1"):
        fake.routes[("GET", path)] = get
        fake.routes[("DELETE", path)] = delete
    kw = {"api_key": "cpuos_test", "api_url": fake.url}

    listed = cpuos.Checkpoint.list(**kw)
    assert [c.name for c in listed] == ["step-3", "step-1"]
    assert cpuos.Checkpoint.get("step-3", **kw) == cpuos.Checkpoint.from_json(CKP)
    assert cpuos.Checkpoint.get(older["id"], **kw).name == "step-1"
    listed[1].delete()
    assert ("DELETE", f"/v1/checkpoints/{older['id']}", b"") in fake.requests
    assert [c.id for c in cpuos.Checkpoint.list(**kw)] == [CKP["id"]]
    with pytest.raises(cpuos.NotFoundError):
        listed[1].delete()  # already gone
    with pytest.raises(cpuos.NotFoundError):
        cpuos.Checkpoint.get("nosuch", **kw)
    with pytest.raises(ValueError):
        cpuos.Checkpoint.get("", **kw)
    fake.routes[("GET", "/v1/checkpoints")] = lambda h, q, b: h.send_json(200, {"checkpoints": []})
    assert cpuos.Checkpoint.list(**kw) == []


def test_checkpoint_answers_are_checked():
    with pytest.raises(cpuos.CpuosError, match="without an id"):
        cpuos.Checkpoint.from_json({"name": "x"})
    with pytest.raises(cpuos.CpuosError):
        cpuos.Checkpoint.from_json([])


def test_create_from_a_checkpoint_and_on_timeout(fake):
    fake.routes[("POST", "/v1/sandboxes")] = lambda h, q, b: h.send_json(
        201, _sbx_obj("sbx_9", parent=b.get("checkpoint"), on_timeout=b.get("on_timeout", "pause")))
    kw = {"api_key": "cpuos_test", "api_url": fake.url}
    ckp = cpuos.Checkpoint.from_json(CKP)
    sbx = cpuos.Sandbox.create(checkpoint=ckp, on_timeout="kill", **kw)
    assert (sbx.id, sbx.parent, sbx.on_timeout) == ("sbx_9", CKP["id"], "kill")
    cpuos.Sandbox.create(checkpoint="step-3", template="python", timeout="1h", **kw)
    cpuos.Sandbox.create(**kw)
    cpuos.Sandbox.create("base", on_timeout="pause", **kw)
    assert fake.bodies("POST", "/v1/sandboxes") == [
        {"checkpoint": CKP["id"], "on_timeout": "kill"},  # the template is the checkpoint's
        {"checkpoint": "step-3", "template": "python", "timeout": "1h"},
        {"template": "python"},
        {"template": "base", "on_timeout": "pause"},
    ]


def test_kill_of_a_paused_sandbox_marks_it_stopped(fake):
    fake.routes[("DELETE", SBX)] = lambda h, q, b: h.send_empty(204)
    sbx = cpuos.Sandbox(api_key="cpuos_test", api_url=fake.url, _data=_sbx_obj(state="paused"))
    sbx.kill()
    assert sbx.state == "stopped"


# Network policies: the shorthand and snake_case spellings the SDK takes, and the API's
# camelCase it sends.

NET = "/v1/sandboxes/sbx_1/network"
CUSTOM = {"mode": "custom", "allowedHosts": ["pypi.org", "*.pythonhosted.org"],
          "allowedCIDRs": ["10.1.0.0/16"], "deniedCIDRs": ["203.0.113.0/24"]}


def test_network_policy_spellings():
    conv = cpuos.sandbox._network_policy
    assert conv("allow-all") == {"mode": "allow-all"}
    assert conv("deny-all") == {"mode": "deny-all"}
    assert conv(CUSTOM) == CUSTOM and conv(CUSTOM) is not CUSTOM
    assert conv({"mode": "custom", "allowed_hosts": ("pypi.org", "*.pythonhosted.org"),
                 "allowed_cidrs": ["10.1.0.0/16"], "denied_cidrs": {"203.0.113.0/24"}}) == CUSTOM
    assert conv({"mode": "allow-all", "denied_cidrs": ["10.0.0.0/8"]}) == {
        "mode": "allow-all", "deniedCIDRs": ["10.0.0.0/8"]}
    # Anything else goes as given: the daemon judges it (and says 422).
    assert conv({"mode": "sometimes", "extra": 1}) == {"mode": "sometimes", "extra": 1}
    with pytest.raises(ValueError, match="allowedHosts"):
        conv({"allowedHosts": ["a.b"], "allowed_hosts": ["c.d"]})
    with pytest.raises(TypeError):
        conv(["allow-all"])


def test_create_sends_the_network_policy(fake):
    fake.routes[("POST", "/v1/sandboxes")] = lambda h, q, b: h.send_json(
        201, _sbx_obj("sbx_9", network=b.get("network", {"mode": "allow-all"})))
    kw = {"api_key": "cpuos_test", "api_url": fake.url}
    assert cpuos.Sandbox.create(network="deny-all", **kw).network == {"mode": "deny-all"}
    sbx = cpuos.Sandbox.create(network={"mode": "custom", "allowed_hosts": ["pypi.org"]}, **kw)
    assert sbx.network == {"mode": "custom", "allowedHosts": ["pypi.org"]}
    assert cpuos.Sandbox.create(**kw).network == {"mode": "allow-all"}  # the daemon's default
    assert [b.get("network") for b in fake.bodies("POST", "/v1/sandboxes")] == [
        {"mode": "deny-all"}, {"mode": "custom", "allowedHosts": ["pypi.org"]}, None]
    with pytest.raises(TypeError):
        cpuos.Sandbox.create(network=3, **kw)
    assert len(fake.bodies("POST", "/v1/sandboxes")) == 3  # refused before a request


def test_get_and_set_network(fake):
    policy = {"mode": "allow-all"}

    def put(h, q, b):
        if b.get("mode") == "custom" and not (b.get("allowedHosts") or b.get("allowedCIDRs")):
            return _error(h, 422, "invalid_argument", "custom allows nothing")
        policy.clear()
        policy.update(b)
        h.send_json(200, {"policy": policy, "refused_packets": 0})

    fake.routes[("GET", NET)] = lambda h, q, b: h.send_json(200, {"policy": policy,
                                                                   "refused_packets": 7})
    fake.routes[("PUT", NET)] = put
    sbx = cpuos.Sandbox(api_key="cpuos_test", api_url=fake.url, _data=_sbx_obj(network=None))
    assert sbx.network is None
    assert sbx.get_network() == {"mode": "allow-all"} and sbx.network == {"mode": "allow-all"}
    assert sbx.set_network("deny-all") == {"mode": "deny-all"} and sbx.network == {"mode": "deny-all"}
    new = sbx.set_network({"mode": "custom", "allowed_hosts": ["pypi.org"],
                           "denied_cidrs": ["203.0.113.0/24"]})
    assert new == {"mode": "custom", "allowedHosts": ["pypi.org"], "deniedCIDRs": ["203.0.113.0/24"]}
    with pytest.raises(cpuos.BadRequestError, match="allows nothing"):
        sbx.set_network({"mode": "custom"})
    assert sbx.network == new  # unchanged by the refusal
    assert fake.bodies("PUT", NET) == [{"mode": "deny-all"}, new, {"mode": "custom"}]


def test_network_errors(fake):
    answers = iter([lambda h: _error(h, 409, "conflict", "sandbox 'sbx_1' is stopped"),
                    lambda h: _error(h, 404, "not_found", "no sandbox 'sbx_1'")])
    fake.routes[("PUT", NET)] = lambda h, q, b: next(answers)(h)
    sbx = _sandbox(fake)
    with pytest.raises(cpuos.ConflictError):
        sbx.set_network("deny-all")
    with pytest.raises(cpuos.NotFoundError):
        sbx.set_network("allow-all")
    with pytest.raises(cpuos.NotFoundError):  # the fake has no GET route
        sbx.get_network()
    fake.routes[("GET", NET)] = lambda h, q, b: h.send_json(200, {"policy": None})
    assert sbx.get_network() is None  # a daemon without networks


USAGE = {"account": "alice", "from": "2026-10-30T09:00:00Z", "to": "2026-11-29T09:00:00Z",
         "sandboxes": 3, "running_seconds": 12.5, "vcpu_seconds": 12.5, "gib_seconds": 6.25,
         "paused_gib_seconds": 1.0, "cost_usd": 0.0004,
         "price": {"usd_per_hour": 0.11, "vcpus": 2, "memory_gib": 4}}


def test_usage(fake):
    queries = []

    def answer(h, q, b):
        queries.append(q)
        h.send_json(200, USAGE)

    fake.routes[("GET", "/v1/usage")] = answer
    kw = {"api_key": "cpuos_test", "api_url": fake.url}
    u = cpuos.usage(**kw)
    assert isinstance(u, cpuos.Usage) and isinstance(u.price, cpuos.Price)
    assert (u.account, u.from_, u.to, u.sandboxes) == ("alice", USAGE["from"], USAGE["to"], 3)
    assert (u.running_seconds, u.vcpu_seconds, u.gib_seconds, u.paused_gib_seconds,
            u.cost_usd) == (12.5, 12.5, 6.25, 1.0, 0.0004)
    assert (u.price.usd_per_hour, u.price.vcpus, u.price.memory_gib) == (0.11, 2, 4)
    tz = datetime.timezone(datetime.timedelta(hours=2))
    cpuos.usage(from_=datetime.datetime(2026, 11, 1, 2, 0, 0, tzinfo=tz),
                to="2026-11-29T00:00:00Z", key="key_0123", **kw)
    assert queries == [{}, {"from": "2026-11-01T00:00:00Z", "to": "2026-11-29T00:00:00Z",
                            "key": "key_0123"}]


def test_usage_errors(fake):
    answers = iter([lambda h: _error(h, 400, "bad_request", "bad from"),
                    lambda h: h.send_json(200, dict(USAGE, cost_usd="free")),
                    lambda h: h.send_json(200, {"account": "bob"})])
    fake.routes[("GET", "/v1/usage")] = lambda h, q, b: next(answers)(h)
    kw = {"api_key": "cpuos_test", "api_url": fake.url}
    with pytest.raises(cpuos.BadRequestError, match="bad from"):
        cpuos.usage(from_="yesterday", **kw)
    with pytest.raises(cpuos.CpuosError, match="cost_usd"):
        cpuos.usage(**kw)
    u = cpuos.usage(**kw)  # missing numbers read as 0
    assert (u.account, u.sandboxes, u.cost_usd, u.price.usd_per_hour) == ("bob", 0, 0.0, 0.0)
    with pytest.raises(TypeError):
        cpuos.usage(from_=12, **kw)


# run_code and its contexts: the requests the SDK sends, whole and streamed answers, the order of
# the callbacks, base64 results, cut streams and error statuses, against the fake; and
# CodeInterpreter's mode "run_code" between the fake and a scripted model.

CODE = "/v1/sandboxes/sbx_1/code"
CONTEXTS = CODE + "/contexts"
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256))  # the exact bytes matter, not the image
EXECUTION = {
    "context": "default", "language": "python", "execution_count": 3,
    "results": [{"is_main_result": False, "text": "<Figure size 640x480 with 1 Axes>",
                 "png": base64.b64encode(PNG).decode()},
                {"is_main_result": True, "text": "   a\n0  1", "html": "<table border=\"1\">",
                 "json": {"a": [1]}, "application/vnd.future": "x"}],
    "stdout": "loaded 1096 rows\n", "stderr": "", "stdout_truncated": False,
    "stderr_truncated": True, "error": None, "timed_out": False, "kernel_restarted": False,
    "restart_reason": None, "results_truncated": False, "duration_ms": 41}
END = {"type": "end", "context": "default", "language": "python", "execution_count": 4,
       "timed_out": False, "kernel_restarted": False, "restart_reason": None,
       "results_truncated": False, "duration_ms": 12}
CTX = {"id": "analysis", "language": "python", "cwd": "/work", "user": "user", "state": "idle",
       "pid": 7}


def test_run_code_whole_answer(fake):
    fake.routes[("POST", CODE)] = lambda h, q, b: h.send_json(200, EXECUTION)
    ex = _sandbox(fake).run_code("df.describe()")
    assert isinstance(ex, cpuos.Execution)
    assert fake.bodies("POST", CODE) == [{"code": "df.describe()", "timeout": "5m"}]
    fig, main = ex.results
    assert (fig.png, fig.text, fig.is_main_result, fig.formats()) == (
        PNG, "<Figure size 640x480 with 1 Axes>", False, ["text", "png"])
    assert (main.html, main.json, main.is_main_result, main.extra) == (
        "<table border=\"1\">", {"a": [1]}, True, {"application/vnd.future": "x"})
    assert main.formats() == ["text", "html", "json", "application/vnd.future"]
    assert ex.text == "   a\n0  1"
    assert (ex.logs.stdout, ex.logs.stderr, ex.error) == (["loaded 1096 rows\n"], [], None)
    assert (ex.context, ex.language, ex.execution_count, ex.duration_ms) == ("default", "python", 3, 41)
    assert (ex.stdout_truncated, ex.stderr_truncated, ex.timed_out, ex.kernel_restarted) == (
        False, True, False, False)
    shown = repr(ex)
    assert f"png=<{len(PNG)} bytes>" in shown and "iVBOR" not in shown and "execution_count=3" in shown
    fake.routes[("POST", CODE)] = lambda h, q, b: h.send_json(200, dict(EXECUTION, results=[]))
    assert _sandbox(fake).run_code("x = 1").text is None  # no main result


def test_run_code_request_bodies(fake):
    fake.routes[("POST", CODE)] = lambda h, q, b: h.send_json(200, EXECUTION)
    sbx = _sandbox(fake)
    sbx.run_code("echo hi", language="bash", context="sh1", timeout=90)
    sbx.run_code("x", context=cpuos.CodeContext.from_json(CTX), timeout=None,
                 figure_formats=("png", "svg"))
    assert fake.bodies("POST", CODE) == [
        {"code": "echo hi", "language": "bash", "context": "sh1", "timeout": 90},
        {"code": "x", "context": "analysis", "figure_formats": ["png", "svg"]}]
    with pytest.raises(TypeError, match="code is a str"):
        sbx.run_code(b"print(1)")
    with pytest.raises(TypeError, match="figure_formats"):
        sbx.run_code("x", figure_formats="svg")
    with pytest.raises(TypeError, match="context"):
        sbx.run_code("x", context=3)
    assert len(fake.bodies("POST", CODE)) == 2  # refused before a request


def test_run_code_callbacks_come_in_order_as_lines_arrive(fake):
    arrived = threading.Event()
    waited = []
    traceback = "Traceback (most recent call last):\n  File \"<cell 4>\", line 3\nValueError: bad"

    def answer(h, q, b):
        h.send_ndjson([
            {"type": "stdout", "data": "one\n"},
            # The rest only after the client has called back for the first line (or 5 s).
            lambda: waited.append(arrived.wait(5)),
            {"type": "result", "is_main_result": False, "text": "<Figure>",
             "png": base64.b64encode(PNG).decode()},
            {"type": "stderr", "data": "warn\n"},
            {"type": "stdout", "data": "two\n"},
            {"type": "progress", "data": "a later line type"},
            {"type": "error", "name": "ValueError", "value": "bad", "traceback": traceback},
            END,
        ])

    fake.routes[("POST", CODE)] = answer
    seen = []

    def on_stdout(text):
        seen.append(("stdout", text))
        arrived.set()

    ex = _sandbox(fake).run_code("x", on_stdout=on_stdout,
                                 on_stderr=lambda t: seen.append(("stderr", t)),
                                 on_result=lambda r: seen.append(("result", r.png)),
                                 on_error=lambda e: seen.append(("error", str(e))))
    assert waited == [True]
    assert seen == [("stdout", "one\n"), ("result", PNG), ("stderr", "warn\n"), ("stdout", "two\n"),
                    ("error", "ValueError: bad")]
    assert (ex.logs.stdout, ex.logs.stderr) == (["one\n", "two\n"], ["warn\n"])
    assert [r.png for r in ex.results] == [PNG] and ex.text is None
    assert (ex.error.name, ex.error.value, ex.error.traceback) == ("ValueError", "bad", traceback)
    assert (ex.execution_count, ex.duration_ms, ex.context) == (4, 12, "default")
    assert fake.bodies("POST", CODE) == [{"code": "x", "timeout": "5m", "stream": True}]
    # One callback is enough to stream; the stream was read to its end, so its connection is reused.
    assert _sandbox(fake).run_code("x", on_error=print).error.name == "ValueError"
    assert fake.connections == 1


def test_run_code_stream_without_its_end_is_an_error(fake):
    fake.routes[("POST", CODE)] = lambda h, q, b: h.send_ndjson([
        {"type": "stdout", "data": "half"}, {"type": "result", "text": "1"}])
    got = []
    with pytest.raises(cpuos.CpuosError, match="without its end line"):
        _sandbox(fake).run_code("x", on_stdout=got.append, on_result=got.append)
    assert got[0] == "half" and got[1].text == "1"


def test_run_code_refuses_bad_results(fake):
    answers = iter([dict(EXECUTION, results=[{"png": "not base64!"}]),
                    dict(EXECUTION, results=[{"png": "iVBORw0KGgo"}]),  # a length not of 4
                    dict(EXECUTION, results=[{"jpeg": 12}]),
                    dict(EXECUTION, results=[{"html": ["<b>"]}]),
                    dict(EXECUTION, results={"text": "1"}),
                    dict(EXECUTION, results=[{"pdf": "JVBE\nRi0x\n"}])])  # line breaks are fine
    fake.routes[("POST", CODE)] = lambda h, q, b: h.send_json(200, next(answers))
    sbx = _sandbox(fake)
    for match in ("png is not valid base64", "png is not valid base64", "jpeg is a int",
                  "html is a list", "not a list"):
        with pytest.raises(cpuos.CpuosError, match=match):
            sbx.run_code("x")
    assert sbx.run_code("x").results[0].pdf == b"%PDF-1"


def test_run_code_error_statuses(fake):
    answers = iter([(409, "conflict", "context 'default' is busy"),
                    (422, "invalid_argument", "language 'cobol' is not known"),
                    (404, "not_found", "no sandbox 'sbx_1'"),
                    (429, "quota_exceeded", "too many operations"),
                    (503, "unavailable", "the VM died"),
                    (409, "conflict", "context 'default' is busy")])
    fake.routes[("POST", CODE)] = lambda h, q, b: _error(h, *next(answers))
    sbx = _sandbox(fake)
    for cls in (cpuos.ConflictError, cpuos.BadRequestError, cpuos.NotFoundError, cpuos.QuotaError,
                cpuos.SandboxError):
        with pytest.raises(cls):
            sbx.run_code("x")
    called = []
    with pytest.raises(cpuos.ConflictError, match="busy") as e:  # streamed: before any line
        sbx.run_code("x", on_stdout=called.append)
    assert (e.value.status, e.value.code, called) == (409, "conflict", [])


def test_run_code_returns_timeouts_and_restarts(fake):
    fake.routes[("POST", CODE)] = lambda h, q, b: h.send_json(200, dict(
        EXECUTION, results=[], timed_out=True, kernel_restarted=True,
        restart_reason="the python kernel exited (signal 9)",
        error={"name": "KeyboardInterrupt", "value": "", "traceback": "..."}))
    ex = _sandbox(fake).run_code("while True: pass", timeout="1s")
    assert (ex.timed_out, ex.kernel_restarted, str(ex.error)) == (True, True, "KeyboardInterrupt")
    assert ex.restart_reason == "the python kernel exited (signal 9)"
    assert "timed_out=True" in repr(ex) and "kernel_restarted=True" in repr(ex)


def test_run_code_callbacks_with_an_answer_that_is_not_streamed(fake):
    fake.routes[("POST", CODE)] = lambda h, q, b: h.send_json(200, dict(
        EXECUTION, stderr="w\n", error={"name": "E", "value": "v"}))
    seen = []
    ex = _sandbox(fake).run_code("x", on_stdout=lambda t: seen.append(("out", t)),
                                 on_stderr=lambda t: seen.append(("err", t)),
                                 on_result=lambda r: seen.append(("result", r.is_main_result)),
                                 on_error=lambda e: seen.append(("error", e.name)))
    assert seen == [("out", "loaded 1096 rows\n"), ("err", "w\n"), ("result", False),
                    ("result", True), ("error", "E")]
    assert ex.error.traceback == ""


def test_code_contexts(fake):
    made = dict(CTX, id="ctx_0a1b2c3d")
    fake.routes[("POST", CONTEXTS)] = lambda h, q, b: h.send_json(201, dict(made, **b))
    fake.routes[("GET", CONTEXTS)] = lambda h, q, b: h.send_json(200, {"contexts": [CTX, made]})
    fake.routes[("POST", CONTEXTS + "/analysis/restart")] = lambda h, q, b: h.send_json(
        200, dict(CTX, pid=9))
    fake.routes[("DELETE", CONTEXTS + "/ctx_0a1b2c3d")] = lambda h, q, b: h.send_empty(204)
    fake.routes[("DELETE", CONTEXTS + "/a%2Fb")] = lambda h, q, b: _error(
        h, 404, "not_found", "no context 'a/b'")
    sbx = _sandbox(fake)
    ctx = sbx.create_code_context()
    assert isinstance(ctx, cpuos.CodeContext)
    assert (ctx.id, ctx.language, ctx.cwd, ctx.user, ctx.state, ctx.pid) == (
        "ctx_0a1b2c3d", "python", "/work", "user", "idle", 7)
    sbx.create_code_context("bash", cwd="/tmp", id="sh", user="root")
    assert fake.bodies("POST", CONTEXTS) == [
        {"language": "python"}, {"language": "bash", "cwd": "/tmp", "id": "sh", "user": "root"}]
    assert [c.id for c in sbx.list_code_contexts()] == ["analysis", "ctx_0a1b2c3d"]
    assert sbx.restart_code_context("analysis").pid == 9
    sbx.remove_code_context(ctx)
    assert fake.requests[-1][:2] == ("DELETE", CONTEXTS + "/ctx_0a1b2c3d")
    with pytest.raises(cpuos.NotFoundError):  # a context id is one path segment, whatever it holds
        sbx.remove_code_context("a/b")
    assert fake.requests[-1][:2] == ("DELETE", CONTEXTS + "/a%2Fb")
    with pytest.raises(ValueError):
        sbx.restart_code_context("")
    fake.routes[("POST", CONTEXTS)] = lambda h, q, b: _error(h, 409, "conflict", "'sh' is taken")
    with pytest.raises(cpuos.ConflictError):
        sbx.create_code_context(id="sh")
    fake.routes[("GET", CONTEXTS)] = lambda h, q, b: h.send_json(200, {"contexts": [{"pid": 1}]})
    with pytest.raises(cpuos.CpuosError, match="without an id"):
        sbx.list_code_contexts()


def test_result_save(tmp_path):
    fig = cpuos.Result.from_json({"png": base64.b64encode(PNG).decode(), "svg": "<svg/>"})
    assert fig.save(tmp_path / "a.png") == "png" and (tmp_path / "a.png").read_bytes() == PNG
    assert fig.save(str(tmp_path / "a.svg")) == "svg" and (tmp_path / "a.svg").read_text() == "<svg/>"
    assert fig.save(tmp_path / "a.image") == "png"  # no suffix it knows: its first image
    with pytest.raises(ValueError, match="no jpeg"):
        fig.save(tmp_path / "a.jpg")
    with pytest.raises(ValueError, match="no image"):
        cpuos.Result(text="1").save(tmp_path / "b.png")
    assert not (tmp_path / "a.jpg").exists() and not (tmp_path / "b.png").exists()


def test_code_interpreter_run_code_mode(fake):
    calls = []

    def answer(h, q, b):
        calls.append(b)
        h.send_json(200, dict(EXECUTION, stdout=f"GREW_MOST 2025-07 {len(calls)}.00\n",
                              error={"name": "Warning", "value": "v", "traceback": "t" * 5000}))

    fake.routes[("POST", CODE)] = answer
    with FakeOpenAI(code="df = load()", loop=True) as model:
        ci = cpuos.CodeInterpreter(sandbox=_sandbox(fake), base_url=model.base_url, api_key="k",
                                   mode="run_code", context="analysis", max_steps=2,
                                   exec_timeout="30s")
        answer = ci.ask("which month?")
    assert calls == [{"code": "df = load()", "context": "analysis", "timeout": "30s"}] * 2
    assert answer.charts == [PNG, PNG]  # the figure of each call, in order
    assert [s.exit_code for s in answer.steps] == [None, None]
    assert answer.steps[1].stdout == "GREW_MOST 2025-07 2.00\n" and answer.steps[1].error.name == "Warning"
    assert [r.is_main_result for r in answer.steps[0].results] == [False, True]
    tool = json.loads(model.tool_messages()[0]["content"])
    assert tool == {"stdout": "GREW_MOST 2025-07 1.00\n", "stderr": "", "result": "   a\n0  1",
                    "error": {"name": "Warning", "value": "v", "traceback": "t" * 2000}}
    assert all("iVBOR" not in m["content"] for m in model.tool_messages())  # no image data
    assert "notebook cell" in model.requests[0][1]["tools"][0]["function"]["description"]
    with pytest.raises(ValueError, match="mode"):
        cpuos.CodeInterpreter(sandbox=_sandbox(fake), base_url=model.base_url, mode="jupyter")


# mypy --strict over the SDK, and over a program that uses `resume` both ways: one name that is a
# classmethod on the class and a method on a handle must type-check as each.

RESUME_PROGRAM = '''
from typing import List

from cpuos import Checkpoint, Sandbox, Usage, usage


class Mine(Sandbox):
    pass


def turn(sbx: Sandbox, mine: Mine) -> None:
    session: str = sbx.pause()
    again: Sandbox = Sandbox.resume(session)
    same: Sandbox = sbx.resume()
    other: Mine = Mine.resume(session, api_key="k", api_url="http://127.0.0.1:1")
    forks: List[Mine] = mine.fork(2)
    ckp: Checkpoint = sbx.checkpoint("step-3")
    new: Sandbox = Sandbox.create(checkpoint=ckp, on_timeout="kill")
    used: Usage = usage(from_="2026-11-01T00:00:00Z")
    names: List[str] = [c.name or "" for c in Checkpoint.list()]
    Checkpoint.get("step-3").delete()
    net = Sandbox.create(network={"mode": "custom", "allowed_hosts": ["pypi.org"]}).network
    policy = sbx.set_network("deny-all") or sbx.get_network() or {}
    mode: str = policy["mode"]
'''

RESUME_MISUSE = '''
from cpuos import Sandbox


def turn(sbx: Sandbox) -> None:
    sbx.resume("ses_0")
    Sandbox.resume()
'''


CODE_PROGRAM = '''
from typing import List, Optional

from cpuos import CodeContext, CodeInterpreter, Execution, ExecutionError, Sandbox


def cell(sbx: Sandbox) -> None:
    ctx: CodeContext = sbx.create_code_context(cwd="/work")
    ex: Execution = sbx.run_code("1 + 1", context=ctx, on_result=lambda r: r.save("fig.png"),
                                 on_error=lambda e: print(e.traceback), figure_formats=["svg"])
    text: Optional[str] = ex.text
    png: Optional[bytes] = ex.results[0].png
    out: List[str] = ex.logs.stdout
    err: Optional[ExecutionError] = ex.error
    contexts: List[CodeContext] = sbx.list_code_contexts()
    sbx.restart_code_context(ctx.id)
    sbx.remove_code_context(ctx)
    charts: List[bytes] = CodeInterpreter(sandbox=sbx, mode="run_code").ask("q").charts
'''

CODE_MISUSE = '''
from cpuos import CodeInterpreter, Sandbox


def cell(sbx: Sandbox) -> None:
    png: str = sbx.run_code("1").results[0].png
    CodeInterpreter(sandbox=sbx, mode="jupyter")
'''


def _mypy(*args):
    try:
        from mypy import api
    except ImportError:
        pytest.fail("mypy is not installed (pip install mypy): the SDK must pass mypy --strict")
    return api.run(["--strict", "--cache-dir", os.devnull, "--no-error-summary", *args])


def test_sdk_passes_mypy_strict():
    out, err, status = _mypy(os.path.dirname(cpuos.__file__))
    assert status == 0, out + err


def test_resume_types_both_ways(tmp_path, monkeypatch):
    monkeypatch.setenv("MYPYPATH", os.path.dirname(os.path.dirname(cpuos.__file__)))
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(textwrap.dedent(RESUME_PROGRAM))
    bad.write_text(textwrap.dedent(RESUME_MISUSE))
    out, err, status = _mypy(str(good))
    assert status == 0, out + err
    out, err, status = _mypy(str(bad))
    assert status == 1 and out.count("error:") == 2, out + err
    assert "Too many arguments" in out and "session_or_id" in out, out


def test_run_code_types_for_callers(tmp_path, monkeypatch):
    monkeypatch.setenv("MYPYPATH", os.path.dirname(os.path.dirname(cpuos.__file__)))
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(CODE_PROGRAM)
    bad.write_text(CODE_MISUSE)
    out, err, status = _mypy(str(good))
    assert status == 0, out + err
    out, err, status = _mypy(str(bad))
    assert status == 1 and out.count("error:") == 2, out + err
    assert '"bytes | None"' in out and "'jupyter'" in out, out
