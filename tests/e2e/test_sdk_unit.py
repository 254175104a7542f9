"""SDK pieces that need no daemon: durations, URLs, errors, result parsing, request bodies."""

import io
import os

import pytest

import cpuos
from cpuos import _client
from cpuos.errors import error_from_response


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
