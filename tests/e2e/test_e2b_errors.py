"""cpuos-e2b refuses bad input on every route with a clear error in E2B's shape (the control
plane's and envd's {"code": N, "message": ...}, Connect's {"code": "not_found", ...} or an
end-of-stream error), and serves on: a wrong or missing key, another sandbox's token, another
account's sandbox, unknown sandboxes and routes, malformed JSON, malformed and oversized Connect
envelopes, what cpuos does not do (501)."""
import base64
import hashlib
import http.client
import json
import urllib.parse
import struct

import pytest

from test_e2b import E2B_BIN, E2b


@pytest.fixture(scope="module")
def e2b(daemon):
    if not E2B_BIN.exists():
        pytest.fail(f"{E2B_BIN} does not exist: build it first (make all)", pytrace=False)
    s = E2b(daemon, "--port-urls", f"http://127.0.0.1:{daemon.url_port}/sbx_{{id}}/{{port}}")
    yield s
    s.close()


def envelope(msg, flags=0):
    body = json.dumps(msg).encode() if not isinstance(msg, bytes) else msg
    return struct.pack(">BI", flags, len(body)) + body


def frames(body):
    """The envelopes of a Connect stream's answer: [(flags, message)]."""
    out = []
    while body:
        flags, n = struct.unpack(">BI", body[:5])
        out.append((flags, json.loads(body[5:5 + n])))
        body = body[5 + n:]
    return out


def e2b_error(r, status):
    assert r.status == status, r
    j = r.json()
    assert j["code"] == status and j["message"], j
    return j["message"]


def test_bad_input_on_every_route(e2b, daemon):
    key = {"X-API-KEY": daemon.key_a}
    # control plane: keys
    assert "X-API-KEY" in e2b_error(e2b.http("GET", "/v2/sandboxes"), 401)
    e2b_error(e2b.http("GET", "/v2/sandboxes", headers={"X-API-KEY": "cpuos_" + "0" * 64}), 401)
    e2b_error(e2b.http("GET", "/v2/sandboxes", headers={"X-API-KEY": "x\u00e9"}), 401)
    # unknown sandboxes, ids that are no sandbox's, routes
    e2b_error(e2b.http("GET", "/sandboxes/0123456789abcdef", headers=key), 404)
    e2b_error(e2b.http("GET", "/sandboxes/sbx_nope", headers=key), 404)
    e2b_error(e2b.http("DELETE", "/sandboxes/0123456789abcdef", headers=key), 404)
    e2b_error(e2b.http("POST", "/sandboxes/0123456789abcdef/pause", headers=key), 404)
    e2b_error(e2b.http("POST", "/v2/sandboxes/0123456789abcdef/connect", body={}, headers=key), 404)
    e2b_error(e2b.http("GET", "/nowhere", headers=key), 404)
    e2b_error(e2b.http("PATCH", "/v2/sandboxes", headers=key), 405)
    # malformed and invalid bodies
    e2b_error(e2b.http("POST", "/v2/sandboxes", body=b"{not json", headers=key), 400)
    e2b_error(e2b.http("POST", "/v2/sandboxes", body=[1], headers=key), 400)
    e2b_error(e2b.http("POST", "/v2/sandboxes", body={"templateID": 7}, headers=key), 400)
    e2b_error(e2b.http("POST", "/v2/sandboxes", body={"templateID": "base", "timeout": "x"},
                       headers=key), 400)
    e2b_error(e2b.http("POST", "/v2/sandboxes", body={"templateID": "no-such-template"},
                       headers=key), 422)
    e2b_error(e2b.http("POST", "/v2/sandboxes", body={"templateID": "base",
                                                      "network": {"allowOut": "x"}}, headers=key), 400)
    # what cpuos does not do
    assert "not supported" in e2b_error(e2b.http("GET", "/volumes", headers=key), 501)
    e2b_error(e2b.http("POST", "/v2/sandboxes", body={"templateID": "base",
                                                      "volumeMounts": [{"name": "v", "path": "/v"}]},
                       headers=key), 501)

    # a sandbox of alice's, through the control plane
    r = e2b.http("POST", "/v2/sandboxes", body={"templateID": "base", "timeout": 300,
                                                "metadata": {"suite": "e2b"}}, headers=key)
    assert r.status == 201, r
    sbx = r.json()
    sid, tok = sbx["sandboxID"], sbx["envdAccessToken"]
    assert sbx["envdVersion"] and sbx["clientID"] and sbx["templateID"] == "base"
    envd = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983"}
    ok = {**envd, "X-Access-Token": tok}
    try:
        # envd: no token, a forged one, another sandbox's id with this token
        e2b_error(e2b.http("GET", f"/files?path=/etc/hostname", headers=envd), 401)
        e2b_error(e2b.http("GET", f"/files?path=/etc/hostname",
                           headers={**envd, "X-Access-Token": tok[:-4] + "AAAA"}), 401)
        e2b_error(e2b.http("GET", f"/files?path=/etc/hostname",
                           headers={**ok, "E2b-Sandbox-Id": "0123456789abcdef"}), 401)
        e2b_error(e2b.http("GET", "/files?path=/etc/hostname",
                           headers={**ok, "E2b-Sandbox-Port": "70000"}), 404)
        # another account's key on alice's sandbox: as if it did not exist
        r = e2b.http("POST", "/filesystem.Filesystem/Stat", body={"path": "/"},
                     headers={**envd, "X-API-KEY": daemon.key_b})
        assert r.status == 404 and r.json()["code"] == "not_found", r
        e2b_error(e2b.http("GET", f"/sandboxes/{sid}", headers={"X-API-KEY": daemon.key_b}), 404)
        # a signed URL that is not
        e2b_error(e2b.http("GET", "/files?path=/etc/hostname&signature=v1_AAAA", headers=envd), 401)
        # a signed URL does what was signed and no more: its user (not a Basic header's), its one
        # path (not a second part's)
        def signed(path, op, user=""):
            raw = f"{path}:{op}:{user}:{tok}".encode()
            sig = "v1_" + base64.b64encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
            return f"/files?path={urllib.parse.quote(path, safe='')}&signature={urllib.parse.quote(sig, safe='')}"
        part = lambda name, data: (f'--x\r\nContent-Disposition: form-data; name="file"; '
                                   f'filename="{name}"\r\n\r\n').encode() + data + b"\r\n"
        mp = {"Content-Type": "multipart/form-data; boundary=x"}
        r = e2b.http("POST", signed("/tmp/as.txt", "write"), body=part("/tmp/as.txt", b"x") + b"--x--",
                     headers={**mp, "Authorization": "Basic cm9vdDo="})  # root:
        assert r.status == 200, r
        r = e2b.http("POST", "/filesystem.Filesystem/Stat", body={"path": "/tmp/as.txt"},
                     headers={**ok, "Content-Type": "application/json"})
        assert r.json()["entry"]["owner"] == "user", r  # the signed user's, not the header's
        r = e2b.http("POST", signed("/tmp/one.txt", "write"), headers=mp,
                     body=part("/tmp/one.txt", b"1") + part("/tmp/two.txt", b"2") + b"--x--")
        assert r.status == 403, r
        assert e2b.http("GET", "/files?path=/tmp/two.txt", headers=ok).status == 404
        r = e2b.http("GET", signed("/tmp/one.txt", "read"), headers=envd)
        assert r.status == 200 and r.body == b"1", r
        # on the one address of E2B_SANDBOX_URL (no sandbox header), the signature finds it
        r = e2b.http("GET", signed("/tmp/one.txt", "read"))
        assert r.status == 200 and r.body == b"1", r
        e2b_error(e2b.http("GET", signed("/tmp/one.txt", "write")), 401)
        # ranges of a file
        assert e2b.http("POST", "/files?path=/tmp/r.txt", body=b"hello",
                        headers={**ok, "Content-Type": "application/octet-stream"}).status == 200
        for rng, status, body, cr in (("bytes=1-3", 206, b"ell", "bytes 1-3/5"),
                                      ("bytes=-2", 206, b"lo", "bytes 3-4/5"),
                                      ("bytes=3-", 206, b"lo", "bytes 3-4/5"),
                                      ("bytes=2-99", 206, b"llo", "bytes 2-4/5"),
                                      ("bytes=0-0,2-3", 200, b"hello", None),
                                      ("items=1-2", 200, b"hello", None)):
            r = e2b.http("GET", "/files?path=/tmp/r.txt", headers={**ok, "Range": rng})
            assert (r.status, r.body, r.headers.get("Content-Range")) == (status, body, cr), (rng, r)
        r = e2b.http("GET", "/files?path=/tmp/r.txt", headers={**ok, "Range": "bytes=5-"})
        assert r.status == 416 and r.headers["Content-Range"] == "bytes */5", r
        # a gzip body that is not, or is cut short: nothing is written
        import gzip as gz
        r = e2b.http("POST", "/files?path=/tmp/g.txt", body=b"not gzip at all",
                     headers={**ok, "Content-Encoding": "gzip"})
        assert r.status == 400, r
        r = e2b.http("POST", "/files?path=/tmp/g.txt", body=gz.compress(b"x" * 100000)[:-20],
                     headers={**ok, "Content-Encoding": "gzip"})
        assert r.status == 400 and "before its end" in r.json()["message"], r
        assert e2b.http("GET", "/files?path=/tmp/g.txt", headers=ok).status == 404
        # files: missing, a directory, no path
        assert e2b.http("GET", "/files?path=/nope", headers=ok).status == 404
        e2b_error(e2b.http("GET", "/files?path=/", headers=ok), 400)
        e2b_error(e2b.http("GET", "/files", headers=ok), 400)
        e2b_error(e2b.http("POST", "/files?path=/tmp/x", body=b"--b\r\n",
                           headers={**ok, "Content-Type": "multipart/form-data; boundary=b"}), 400)
        e2b_error(e2b.http("POST", "/files?path=/tmp/x", body=b"x",
                           headers={**ok, "Content-Encoding": "br"}), 415)
        # Connect, unary: not JSON, not an object, a wrong type, a missing field, a wrong content type
        rpc = {**ok, "Content-Type": "application/json", "Connect-Protocol-Version": "1"}
        for body in (b"{", b"[]"):
            r = e2b.http("POST", "/filesystem.Filesystem/Stat", body=body, headers=rpc)
            assert r.status == 400 and r.json()["code"] == "invalid_argument", r
        r = e2b.http("POST", "/filesystem.Filesystem/Stat", body=b"{}", headers=rpc)
        assert r.status == 400 and "path" in r.json()["message"], r
        r = e2b.http("POST", "/filesystem.Filesystem/Stat", body=b"{}",
                     headers={**rpc, "Content-Type": "application/proto"})
        assert r.status == 415, r
        r = e2b.http("POST", "/filesystem.Filesystem/Stat", body={"path": "/nope"}, headers=rpc)
        assert r.status == 404 and r.json()["code"] == "not_found", r
        r = e2b.http("POST", "/process.Process/SendSignal",
                     body={"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"}, headers=rpc)
        assert r.status == 404 and r.json()["code"] == "not_found", r
        r = e2b.http("POST", "/process.Process/SendSignal",
                     body={"process": {"pid": -1}, "signal": "SIGNAL_SIGKILL"}, headers=rpc)
        assert r.status == 400, r
        r = e2b.http("POST", "/process.Process/Nope", body={}, headers=rpc)
        assert r.status == 404, r
        # Connect, streams: a short envelope, a length past the body, two messages, compressed,
        # an oversize frame
        st = {**ok, "Content-Type": "application/connect+json", "Connect-Protocol-Version": "1"}
        start = {"process": {"cmd": "/bin/true"}}
        for body in (b"\x00\x00", envelope(start)[:-1], envelope(start) + envelope(start),
                     envelope(start, flags=1), struct.pack(">BI", 0, 64 << 20) + b"{}"):
            r = e2b.http("POST", "/process.Process/Start", body=body, headers=st)
            assert r.status == 200 and r.headers["Content-Type"] == "application/connect+json", r
            (flags, end), = frames(r.body)
            assert flags == 2 and end["error"]["code"] == "invalid_argument", end
        # a client stream (StreamInput): data before start, a cut envelope, a wrong codec
        for body in (envelope({"data": {"input": {"stdin": "eA=="}}}), envelope({"x": 1})[:-1],
                     envelope({"start": {"process": {"pid": 999999}}}) +
                     envelope({"data": {"input": {"stdin": "eA=="}}})):
            r = e2b.http("POST", "/process.Process/StreamInput", body=body, headers=st)
            (flags, end), = frames(r.body)
            assert flags == 2 and end["error"]["code"] in ("invalid_argument", "not_found"), (body, end)
        assert e2b.http("POST", "/process.Process/StreamInput", body=b"{}", headers=rpc).status == 415
        r = e2b.http("POST", "/process.Process/Start", body=b"\x00" * (2 << 20), headers=st)
        assert r.status == 413 and r.json()["code"] == 413, r
        # a command that cannot start ends its stream with cpuosd's reason
        r = e2b.http("POST", "/process.Process/Start", headers=st,
                     body=envelope({"process": {"cmd": "/nope"}}))
        evs = frames(r.body)
        assert evs[-1][0] == 2, evs
        # and it serves on: a good stream
        r = e2b.http("POST", "/process.Process/Start", headers=st,
                     body=envelope({"process": {"cmd": "/bin/sh", "args": ["-c", "echo ok"]}}))
        evs = frames(r.body)
        assert "start" in evs[0][1]["event"], evs
        out = b"".join(__import__("base64").b64decode(m["event"]["data"]["stdout"])
                       for f, m in evs if f == 0 and "data" in m["event"])
        assert out == b"ok\n", evs
        assert evs[-2][1]["event"]["end"].get("exitCode", 0) == 0 and evs[-1] == (2, {}), evs
        # cpuosd's close_stdin, which E2B's stdin: false is: only for a background process
        # without stdin or a terminal
        for body in ({"cmd": "cat", "close_stdin": True},
                     {"cmd": "cat", "background": True, "close_stdin": True, "stdin": "x"},
                     {"cmd": "cat", "background": True, "close_stdin": True,
                      "pty": {"rows": 2, "cols": 2}},
                     {"cmd": "cat", "background": True, "close_stdin": "yes"}):
            r = daemon.http("POST", f"/v1/sandboxes/sbx_{sid}/exec", body=body, key=daemon.key_a)
            assert r.status == 422 and r.json()["error"]["code"] == "invalid_argument", (body, r)
        # the interpreter's port: a bad body, a context that is not
        ci = {**ok, "E2b-Sandbox-Port": "49999"}
        e2b_error(e2b.http("POST", "/execute", body=b"[", headers=ci), 400)
        e2b_error(e2b.http("POST", "/execute", body={"language": "python"}, headers=ci), 400)
        e2b_error(e2b.http("POST", "/execute", body={"code": "1", "language": "cobol"}, headers=ci),
                  422)
        e2b_error(e2b.http("DELETE", "/contexts/nope", headers=ci), 404)
        # any other port: sent to cpuosd's port URL, method, path and query as they came
        r = e2b.http("POST", "/app/x?a=1&b=%2F", body=b"{}", headers={**envd, "E2b-Sandbox-Port": "8080"})
        loc = f"http://127.0.0.1:{daemon.url_port}/sbx_{sid}/8080/app/x?a=1&b=%2F"
        assert r.status == 307 and r.headers["Location"] == loc, r
        r = e2b.http("GET", "/a%3Fb%0D%0Ac", headers={**envd, "E2b-Sandbox-Port": "8080"})
        assert r.headers["Location"].endswith("/8080/a%3Fb%0D%0Ac"), r
        # an id that is no sandbox's (not 16 hex) never becomes part of a Location
        e2b_error(e2b.http("GET", "/", headers={"E2b-Sandbox-Id": "@evil.example/#x",
                                                "E2b-Sandbox-Port": "8080"}), 404)
        r = e2b.http("GET", "/", headers={"Host": f"8080-{sid}.e2b.test"})
        assert r.headers["Location"] == f"http://127.0.0.1:{daemon.url_port}/sbx_{sid}/8080/", r
        # where cpuosd's proxy answers for the sandbox: nothing listens on 8080 there
        host, _, rest = loc[len("http://"):].partition("/")
        conn = http.client.HTTPConnection(host, timeout=60)
        conn.request("GET", "/" + rest)
        resp = conn.getresponse()
        assert resp.status == 502 and b"port_closed" in resp.read(), resp.status
        conn.close()
    finally:
        assert e2b.http("DELETE", f"/sandboxes/{sid}", headers=key).status == 204
    assert e2b.proc.poll() is None, e2b.log_tail()
