"""Bad input over raw HTTP: each is a 4xx with a JSON error, and the daemon keeps serving."""

import json

import pytest

import cpuos

GOOD = {"template": "base", "timeout": "1m"}


@pytest.fixture(scope="module")
def target(daemon):
    """A running base sandbox of alice's."""
    sbx = cpuos.Sandbox.create(template="base", timeout="20m", api_key=daemon.key_a, api_url=daemon.url)
    yield sbx
    sbx.kill()


@pytest.fixture(scope="module")
def killed(daemon):
    """A sandbox of alice's that was killed."""
    sbx = cpuos.Sandbox.create(template="base", timeout="5m", api_key=daemon.key_a, api_url=daemon.url)
    sbx.kill()
    return sbx


def expect(daemon, resp, status, code):
    assert resp.status == status, f"expected {status} {code}, got {resp}"
    try:
        body = json.loads(resp.body)
    except ValueError:
        pytest.fail(f"error body is not JSON: {resp}")
    err = body.get("error") if isinstance(body, dict) else None
    assert isinstance(err, dict), f"no error object: {resp}"
    assert err.get("code") == code, f"expected code {code}: {resp}"
    assert isinstance(err.get("message"), str) and err["message"], f"no message: {resp}"
    health = daemon.http("GET", "/v1/health")
    assert health.status == 200 and health.json()["status"] == "ok", "the daemon stopped serving"


def with_(**changes):
    return json.dumps({**GOOD, **changes})


CREATE_CASES = [
    ("malformed json", b'{"template": "base",', 400, "bad_request"),
    ("not json", b"template=base", 400, "bad_request"),
    ("empty body", b"", 400, "bad_request"),
    ("array body", b'["base"]', 400, "bad_request"),
    ("string body", b'"base"', 400, "bad_request"),
    ("missing template", b'{"timeout": "1m"}', 422, "invalid_argument"),
    ("template not a string", with_(template=5), 422, "invalid_argument"),
    ("unknown template", with_(template="no-such-template"), 422, "invalid_argument"),
    ("template with a path", with_(template="../python"), 422, "invalid_argument"),
    ("vcpus 0", with_(vcpus=0), 422, "invalid_argument"),
    ("vcpus 1000", with_(vcpus=1000), 422, "invalid_argument"),
    ("vcpus a string", with_(vcpus="2"), 422, "invalid_argument"),
    ("vcpus a float", with_(vcpus=1.5), 422, "invalid_argument"),
    ("memory 1 TB", with_(memory_mb=1 << 20), 422, "invalid_argument"),
    ("memory 1 MB", with_(memory_mb=1), 422, "invalid_argument"),
    ("memory negative", with_(memory_mb=-512), 422, "invalid_argument"),
    ("disk 0", with_(disk_mb=0), 422, "invalid_argument"),
    ("disk huge", with_(disk_mb=1 << 40), 422, "invalid_argument"),
    ("timeout negative number", with_(timeout=-5), 422, "invalid_argument"),
    ("timeout negative string", with_(timeout="-5m"), 422, "invalid_argument"),
    ("timeout zero", with_(timeout=0), 422, "invalid_argument"),
    ("timeout 0s", with_(timeout="0s"), 422, "invalid_argument"),
    ("timeout unparsable", with_(timeout="soon"), 422, "invalid_argument"),
    ("timeout empty", with_(timeout=""), 422, "invalid_argument"),
    ("timeout unit only", with_(timeout="m"), 422, "invalid_argument"),
    ("timeout fraction", with_(timeout=1.5), 422, "invalid_argument"),
    ("timeout bool", with_(timeout=True), 422, "invalid_argument"),
    ("timeout over 24h", with_(timeout="25h"), 422, "invalid_argument"),
    ("timeout overflow", with_(timeout="99999999999999999999h"), 422, "invalid_argument"),
    ("env not an object", with_(env=["A=1"]), 422, "invalid_argument"),
    ("env value not a string", with_(env={"A": 1}), 422, "invalid_argument"),
    ("metadata value not a string", with_(metadata={"k": ["v"]}), 422, "invalid_argument"),
    ("metadata 65 entries", with_(metadata={f"k{i}": "v" for i in range(65)}), 422,
     "invalid_argument"),
]


@pytest.mark.parametrize("body,status,code", [c[1:] for c in CREATE_CASES],
                         ids=[c[0] for c in CREATE_CASES])
def test_create_bad_input(daemon, body, status, code):
    r = daemon.http("POST", "/v1/sandboxes", body=body, key=daemon.key_a,
                    headers={"Content-Type": "application/json"})
    expect(daemon, r, status, code)


def test_body_over_the_limit(daemon):
    body = b'{"template": "base", "metadata": {"x": "' + b"a" * (1 << 20) + b'"}}'
    r = daemon.http("POST", "/v1/sandboxes", body=body, key=daemon.key_a,
                    headers={"Content-Type": "application/json"})
    expect(daemon, r, 413, "payload_too_large")


def test_body_over_the_limit_announced(daemon):
    """A Content-Length over the limit is refused; the daemon does not wait for the body."""
    r = daemon.http("POST", "/v1/sandboxes", body=b"{}", key=daemon.key_a, timeout=30,
                    headers={"Content-Type": "application/json", "Content-Length": str(64 << 20)})
    expect(daemon, r, 413, "payload_too_large")


EXEC_CASES = [
    ("malformed json", b'{"cmd": ', 400, "bad_request"),
    ("no cmd or argv", b"{}", 422, "invalid_argument"),
    ("cmd not a string", json.dumps({"cmd": 5}), 422, "invalid_argument"),
    ("argv a string", json.dumps({"argv": "ls -l"}), 422, "invalid_argument"),
    ("argv empty", json.dumps({"argv": []}), 422, "invalid_argument"),
    ("argv with a number", json.dumps({"argv": ["echo", 1]}), 422, "invalid_argument"),
    ("timeout unparsable", json.dumps({"cmd": "true", "timeout": "abc"}), 422, "invalid_argument"),
    ("timeout negative", json.dumps({"cmd": "true", "timeout": -1}), 422, "invalid_argument"),
    ("timeout over 24h", json.dumps({"cmd": "true", "timeout": "48h"}), 422, "invalid_argument"),
    ("env value not a string", json.dumps({"cmd": "true", "env": {"A": 1}}), 422,
     "invalid_argument"),
    ("unknown user", json.dumps({"cmd": "true", "user": "nobody-here"}), 422, "invalid_argument"),
    ("stdin not a string", json.dumps({"cmd": "cat", "stdin": 5}), 422, "invalid_argument"),
    ("background not a bool", json.dumps({"cmd": "true", "background": "yes"}), 422,
     "invalid_argument"),
]


@pytest.mark.parametrize("body,status,code", [c[1:] for c in EXEC_CASES],
                         ids=[c[0] for c in EXEC_CASES])
def test_exec_bad_input(daemon, target, body, status, code):
    r = daemon.http("POST", f"/v1/sandboxes/{target.id}/exec", body=body, key=daemon.key_a,
                    headers={"Content-Type": "application/json"})
    expect(daemon, r, status, code)


def test_set_timeout_bad_input(daemon, target):
    for value in ("forever", -3, "0s", "25h"):
        r = daemon.http("POST", f"/v1/sandboxes/{target.id}/timeout", body={"timeout": value},
                        key=daemon.key_a)
        expect(daemon, r, 422, "invalid_argument")


BAD_PATHS = [
    ("empty", "path="),
    ("missing", ""),
    ("relative", "path=work/a.txt"),
    ("dot-dot", "path=/work/../etc/passwd"),
    ("dot-dot at the end", "path=/work/.."),
    ("NUL byte", "path=/work/a%00b"),
    ("very long", "path=/" + "a" * 5000),
    ("long with components", "path=" + "/abcdefgh" * 500),
]


@pytest.mark.parametrize("query", [p[1] for p in BAD_PATHS], ids=[p[0] for p in BAD_PATHS])
def test_bad_paths(daemon, target, query):
    base = f"/v1/sandboxes/{target.id}/files"
    for method, route, body in (("GET", base, None), ("PUT", base, b"data"),
                                ("DELETE", base, None), ("GET", base + "/stat", None),
                                ("GET", base + "/list", None)):
        r = daemon.http(method, f"{route}?{query}", body=body, key=daemon.key_a)
        expect(daemon, r, 400, "bad_request")
    value = "" if query == "" else query[5:].replace("%00", "\0")
    for route, body in (("/mkdir", {"path": value}), ("/rename", {"from": value, "to": "/work/x"}),
                        ("/rename", {"from": "/etc/hostname", "to": value})):
        r = daemon.http("POST", base + route, body=body, key=daemon.key_a)
        expect(daemon, r, 400, "bad_request")


def test_bad_query_parameters(daemon, target):
    for query in ("limit=0", "limit=101", "limit=abc", "limit=-1"):
        r = daemon.http("GET", f"/v1/sandboxes?{query}", key=daemon.key_a)
        expect(daemon, r, 400, "bad_request")
    for query in ("depth=0", "depth=17", "depth=x"):
        r = daemon.http("GET", f"/v1/sandboxes/{target.id}/files/list?path=/work&{query}",
                        key=daemon.key_a)
        expect(daemon, r, 400, "bad_request")


AUTH_CASES = [
    ("no header", {}),
    ("wrong key", {"Authorization": "Bearer cpuos_0123456789abcdef"}),
    ("empty bearer", {"Authorization": "Bearer "}),
    ("basic auth", {"Authorization": "Basic YWxpY2U6c2VjcmV0"}),
    ("key without Bearer", None),
]


@pytest.mark.parametrize("headers", [c[1] for c in AUTH_CASES], ids=[c[0] for c in AUTH_CASES])
def test_missing_or_wrong_key(daemon, target, headers):
    if headers is None:
        headers = {"Authorization": daemon.key_a}
    for method, path in (("GET", "/v1/sandboxes"), ("POST", "/v1/sandboxes"),
                         ("GET", f"/v1/sandboxes/{target.id}"),
                         ("POST", f"/v1/sandboxes/{target.id}/exec"),
                         ("GET", f"/v1/sandboxes/{target.id}/files?path=/etc/hostname")):
        body = json.dumps({"template": "base"} if path == "/v1/sandboxes" else {"cmd": "true"})
        r = daemon.http(method, path, body=body if method == "POST" else None, headers=headers)
        expect(daemon, r, 401, "unauthorized")


def test_health_and_openapi_need_no_key(daemon):
    assert daemon.http("GET", "/v1/health").json()["status"] == "ok"
    doc = daemon.http("GET", "/v1/openapi.json")
    assert doc.status == 200 and doc.json()["openapi"].startswith("3.0")


def test_unknown_routes(daemon, target):
    for path in ("/v1/nope", "/nope", "/", "/v2/sandboxes", "/v1/sandboxes/sbx_0000000000000000",
                 "/v1/sandboxes/not-an-id", f"/v1/sandboxes/{target.id}/nope",
                 f"/v1/sandboxes/{target.id}/processes/424242",
                 f"/v1/sandboxes/{target.id}/processes/not-a-pid"):
        expect(daemon, daemon.http("GET", path, key=daemon.key_a), 404, "not_found")
    r = daemon.http("POST", "/v1/sandboxes/sbx_0000000000000000/exec", body={"cmd": "true"},
                    key=daemon.key_a)
    expect(daemon, r, 404, "not_found")


def test_keys_are_not_served_over_tcp(daemon):
    expect(daemon, daemon.http("GET", "/v1/keys", key=daemon.key_a), 404, "not_found")
    r = daemon.http("POST", "/v1/keys", body={"name": "mallory"}, key=daemon.key_a)
    expect(daemon, r, 404, "not_found")


def test_wrong_methods(daemon, target):
    for method, path in (("PATCH", "/v1/sandboxes"), ("DELETE", "/v1/sandboxes"),
                         ("PUT", "/v1/health"), ("POST", "/v1/health"),
                         ("POST", f"/v1/sandboxes/{target.id}"),
                         ("PUT", f"/v1/sandboxes/{target.id}"),
                         ("GET", f"/v1/sandboxes/{target.id}/exec"),
                         ("GET", f"/v1/sandboxes/{target.id}/timeout"),
                         ("POST", f"/v1/sandboxes/{target.id}/files/stat?path=/work")):
        body = b"{}" if method in ("POST", "PUT", "PATCH") else None
        r = daemon.http(method, path, key=daemon.key_a, body=body)
        expect(daemon, r, 405, "method_not_allowed")


def test_killed_sandbox(daemon, killed):
    base = f"/v1/sandboxes/{killed.id}"
    r = daemon.http("GET", base, key=daemon.key_a)
    assert r.status == 200 and r.json()["state"] == "stopped" and r.json()["end_reason"] == "killed"
    expect(daemon, daemon.http("POST", base + "/exec", body={"cmd": "true"}, key=daemon.key_a),
           409, "conflict")
    expect(daemon, daemon.http("PUT", base + "/files?path=/work/x", body=b"x", key=daemon.key_a),
           409, "conflict")
    expect(daemon, daemon.http("GET", base + "/files?path=/etc/hostname", key=daemon.key_a),
           409, "conflict")
    expect(daemon, daemon.http("POST", base + "/timeout", body={"timeout": "1h"}, key=daemon.key_a),
           409, "conflict")
    assert daemon.http("DELETE", base, key=daemon.key_a).status == 204
    with pytest.raises(cpuos.ConflictError):
        killed.exec("true")


def test_bad_signal_and_process_input(daemon, target):
    proc = target.exec("sleep 120", background=True)
    base = f"/v1/sandboxes/{target.id}/processes/{proc.pid}"
    for value in ("SIGNOPE", 0.5, [15], 99999, -1):
        r = daemon.http("POST", base + "/signal", body={"signal": value}, key=daemon.key_a)
        expect(daemon, r, 422, "invalid_argument")
    expect(daemon, daemon.http("POST", base + "/signal", body=b"{", key=daemon.key_a),
           400, "bad_request")
    for query in ("timeout=abc", "timeout=-1s"):
        r = daemon.http("POST", f"{base}/wait?{query}", key=daemon.key_a)
        assert r.status in (400, 422), r  # a bad query parameter (400) that is a duration (422)
        expect(daemon, r, r.status, "bad_request" if r.status == 400 else "invalid_argument")
    proc.kill()
