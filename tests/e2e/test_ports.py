"""Port URLs against a real cpuosd: a dev server in the node template, started with a background
exec, served at sbx.url(port) through the daemon's reverse proxy (path URLs, and wildcard-domain
URLs on a daemon with --url-domain): plain responses, a streamed one, a WebSocket echo, the token
(query parameter turned cookie, cookie, header) and its refusal, a paused sandbox resumed by a
request, clear errors for nothing listening and no such sandbox, public sandboxes."""

import base64
import http.client
import json
import os
import socket
import time
import urllib.parse

import pytest

import cpuos
from conftest import SLOW, free_port, started_daemon
from test_cpuos_cli import cpuos as cli

PORT = 3000

# The guest's server: node's http module only (no packages), on 0.0.0.0. /headers answers
# with the URL and headers it got; /stream sends 5 chunks 300 ms apart; /ws is a WebSocket
# that echoes text frames (the handshake and framing written out, small frames only).
SERVER = r"""
const http = require('http'), crypto = require('crypto');
const s = http.createServer((req, res) => {
  if (req.url.startsWith('/headers')) {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({url: req.url, headers: req.headers}));
  } else if (req.url === '/stream') {
    let n = 0;
    res.writeHead(200, {'content-type': 'text/plain'});
    const t = setInterval(() => {
      res.write('chunk ' + n + ' ' + Date.now() + '\n');
      if (++n === 5) { clearInterval(t); res.end(); }
    }, 300);
  } else if (req.method === 'POST') {
    const parts = [];
    req.on('data', (d) => parts.push(d));
    req.on('end', () => res.end('got ' + Buffer.concat(parts).length + ' bytes'));
  } else {
    res.end('hello from node ' + process.version);
  }
});
s.on('upgrade', (req, sock) => {
  const magic = '258EAFA5-E914-47DA-95CA-C5AB0DC85B11';
  const accept = crypto.createHash('sha1')
    .update(req.headers['sec-websocket-key'] + magic).digest('base64');
  sock.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n' +
             'Sec-WebSocket-Accept: ' + accept + '\r\n\r\n');
  sock.on('data', (b) => {
    const len = b[1] & 127, mask = b.slice(2, 6), data = Buffer.alloc(len);
    for (let i = 0; i < len; i++) data[i] = b[6 + i] ^ mask[i % 4];
    const reply = Buffer.from('echo: ' + data.toString());
    sock.write(Buffer.concat([Buffer.from([0x81, reply.length]), reply]));
  });
});
s.listen(PORT, '0.0.0.0', () => console.log('listening'));
""".replace("PORT", str(PORT))


@pytest.fixture(scope="module")
def portd():
    yield from started_daemon(key="ports")


@pytest.fixture(scope="module")
def served(portd):
    """A node sandbox with the server running."""
    sbx = cpuos.Sandbox.create(template="node", timeout="30m", api_key=portd.key_a,
                               api_url=portd.url)
    start_server(sbx)
    yield sbx
    sbx.kill()


def start_server(sbx):
    sbx.files.write("/work/server.js", SERVER)
    sbx.exec("cd /work && node server.js > /work/server.log 2>&1", background=True)
    deadline = time.monotonic() + 60 * SLOW
    while "listening" not in sbx.exec("cat /work/server.log", timeout="30s").stdout:
        assert time.monotonic() < deadline, sbx.exec("cat /work/server.log").stdout
        time.sleep(0.3)


def request(url, method="GET", headers=None, body=None, timeout=60):
    """(status, headers dict with lower-case names, body bytes) without following redirects."""
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout * SLOW)
    try:
        c.request(method, u.path + ("?" + u.query if u.query else ""), body=body,
                  headers=headers or {})
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def bare(url):
    """The URL without its token."""
    return url.split("?cpuos_token=")[0]


def test_url_serves_the_dev_server_with_its_token(served):
    url = served.url(PORT)
    assert "?cpuos_token=" + served.traffic_token in url
    assert f"/{served.id}/{PORT}/" in url
    # A browser's first visit: a redirect that turns the token into a cookie.
    status, headers, _ = request(url)
    assert status == 302, (status, headers)
    assert headers["location"] == f"/{served.id}/{PORT}/"
    cookie = headers["set-cookie"]
    assert cookie.startswith(f"cpuos_token={served.traffic_token};") and "HttpOnly" in cookie
    assert f"Path=/{served.id}/{PORT}" in cookie
    status, _, body = request(bare(url), headers={"Cookie": cookie.split(";")[0]})
    assert status == 200 and body.startswith(b"hello from node v"), (status, body)
    # The header does as well; the guest sees neither, and the path without the prefix.
    status, _, body = request(bare(url) + "headers?a=1",
                              headers={"cpuos-traffic-token": served.traffic_token,
                                       "Cookie": "theme=dark; cpuos_token=" + served.traffic_token})
    assert status == 200, body
    seen = json.loads(body)
    assert seen["url"] == "/headers?a=1"
    assert "cpuos-traffic-token" not in seen["headers"]
    assert seen["headers"]["cookie"] == "theme=dark"
    assert seen["headers"]["connection"] == "close"  # a path URL's connection carries one request
    assert seen["headers"]["x-forwarded-for"] == "127.0.0.1"
    # A request body goes through.
    status, _, body = request(bare(url) + "upload", "POST", body=b"x" * 300000,
                              headers={"cpuos-traffic-token": served.traffic_token})
    assert (status, body) == (200, b"got 300000 bytes")


def test_cli_url(served, portd):
    r = cli(portd, "url", served.id, str(PORT), key=portd.key_a)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode().strip() == served.url(PORT)
    r = cli(portd, "url", served.id, "http", key=portd.key_a)
    assert r.returncode == 2 and b"invalid port 'http'" in r.stderr
    r = cli(portd, "url", "sbx_0123456789abcdef", "80", key=portd.key_a)
    assert r.returncode == 1 and b"no sandbox" in r.stderr.lower(), r.stderr


def test_url_refuses_without_the_token(served, portd):
    for headers in ({}, {"cpuos-traffic-token": "0" * 32}, {"Cookie": "cpuos_token=nope"}):
        status, h, body = request(bare(served.url(PORT)), headers=headers)
        assert status == 401, (headers, status, body)
        assert h["content-type"] == "application/json"
        assert "traffic token" in json.loads(body)["error"]["message"]
    status, _, _ = request(bare(served.url(PORT)) + "?cpuos_token=" + "f" * 32)
    assert status == 401


def test_streamed_response_arrives_as_it_is_sent(served):
    u = urllib.parse.urlsplit(served.url(PORT))
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=60 * SLOW)
    c.request("GET", u.path + "stream", headers={"cpuos-traffic-token": served.traffic_token})
    r = c.getresponse()
    assert r.status == 200
    arrived = []
    while len(arrived) < 5:
        line = r.fp.readline()  # chunked: a size line, the chunk, an empty line
        if line.startswith(b"chunk "):
            arrived.append(time.monotonic())
        assert line, arrived
    c.close()
    # Sent 300 ms apart: the first came well before the last was sent.
    assert arrived[-1] - arrived[0] > 0.8, arrived


def ws_connect(host, port, path, headers):
    s = socket.create_connection((host, port), timeout=60 * SLOW)
    key = base64.b64encode(os.urandom(16)).decode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
               f"{extra}\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        more = s.recv(4096)
        assert more, head
        head += more
    return s, head.decode()


def ws_send(s, text):
    data, mask = text.encode(), os.urandom(4)
    s.sendall(bytes([0x81, 0x80 | len(data)]) + mask +
              bytes(b ^ mask[i % 4] for i, b in enumerate(data)))


def ws_recv(s):
    head = s.recv(2)
    assert len(head) == 2 and head[0] == 0x81, head
    data = b""
    while len(data) < head[1]:
        data += s.recv(head[1] - len(data))
    return data.decode()


def test_websocket_echo(served):
    u = urllib.parse.urlsplit(served.url(PORT))
    s, head = ws_connect(u.hostname, u.port, u.path + "ws",
                         {"cpuos-traffic-token": served.traffic_token})
    try:
        assert head.startswith("HTTP/1.1 101"), head
        for text in ("hello", "a second message on the same connection"):
            ws_send(s, text)
            assert ws_recv(s) == "echo: " + text
    finally:
        s.close()
    # Without the token there is no upgrade.
    s, head = ws_connect(u.hostname, u.port, u.path + "ws", {})
    s.close()
    assert head.startswith("HTTP/1.1 401"), head


def test_clear_errors(served, portd):
    base = bare(served.url(PORT))
    token = {"cpuos-traffic-token": served.traffic_token}
    status, _, body = request(base.replace(f"/{PORT}/", "/3999/"), headers=token)
    assert status == 502, body
    assert "nothing listens on port 3999" in json.loads(body)["error"]["message"]
    other = base.replace(served.id, "sbx_0123456789abcdef")
    status, _, body = request(other, headers=token)
    assert status == 404 and b"no sandbox" in body, body
    root = base.split(f"/{served.id}/")[0]
    for path in ("/", "/sbx_nothex/3000/", f"/{served.id}/0/", f"/{served.id}/70000/"):
        status, _, body = request(root + path)
        assert status == 404 and b"no sandbox port here" in body, (path, body)
    with socket.create_connection((urllib.parse.urlsplit(base).hostname,
                                   urllib.parse.urlsplit(base).port)) as s:
        s.sendall(b"NOT HTTP\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400")


def test_a_request_resumes_a_paused_sandbox(portd):
    sbx = cpuos.Sandbox.create(template="node", timeout="10m", api_key=portd.key_a,
                               api_url=portd.url)
    try:
        start_server(sbx)
        sbx.pause()
        assert sbx.info().state == "paused"
        status, _, body = request(bare(sbx.url(PORT)) + "headers",
                                  headers={"cpuos-traffic-token": sbx.traffic_token})
        assert status == 200, body
        assert sbx.info().state == "running"
        # A sandbox that was killed is gone for good.
        sbx.kill()
        status, _, body = request(bare(sbx.url(PORT)),
                                  headers={"cpuos-traffic-token": sbx.traffic_token})
        assert status == 410, body
    finally:
        sbx.kill()


@pytest.fixture
def domaind():
    """A daemon with --url-domain sbx.test:<its URL port>."""
    url_port = free_port()
    for d in started_daemon("--url-listen", f"127.0.0.1:{url_port}", "--url-domain",
                        f"sbx.test:{url_port}", key="domain"):
        d.url_port = url_port
        yield d


def test_wildcard_domain_and_public(domaind):
    """With --url-domain: http://<port>-<hex>.<domain>/, routed by Host. A public sandbox needs
    no token; a fork of it is public too, with a token of its own."""
    d, url_port = domaind, domaind.url_port
    sbx = cpuos.Sandbox.create(template="node", timeout="10m", api_key=d.key_a, api_url=d.url,
                               public=True)
    start_server(sbx)
    assert sbx.public
    assert sbx.url(PORT) == f"http://{PORT}-{sbx.id[4:]}.sbx.test:{url_port}/"
    # The name is in no DNS here: reach the listener and name the host.
    host = f"{PORT}-{sbx.id[4:]}.sbx.test:{url_port}"
    status, _, body = request(f"http://127.0.0.1:{url_port}/headers?x=1", headers={"Host": host})
    assert status == 200, body
    seen = json.loads(body)
    assert seen["url"] == "/headers?x=1" and seen["headers"]["host"] == host
    assert seen["headers"]["connection"] == "close"  # one request per connection here too
    status, _, body = request(f"http://127.0.0.1:{url_port}/", headers={"Host": "sbx.test"})
    assert status == 404, body
    (kid,) = sbx.fork()
    assert kid.public and kid.traffic_token and kid.traffic_token != sbx.traffic_token
    private = cpuos.Sandbox.create(template="base", timeout="10m", api_key=d.key_a, api_url=d.url)
    assert not private.public
    assert private.url(80).endswith("/?cpuos_token=" + private.traffic_token)
    status, _, _ = request(f"http://127.0.0.1:{url_port}/",
                           headers={"Host": f"80-{private.id[4:]}.sbx.test"})
    assert status == 401
