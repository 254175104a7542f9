"""A fake of cpuosd's HTTP side over real HTTP/1.1, for the tests of what a client sends and
how it reads the answers: the Python SDK's (sdk/python/tests) and the CLI's (test_cpuos_cli.py).
It checks what the client sends and how it reuses connections, and answers what a test routes."""

import http.server
import json
import socket
import socketserver
import threading
import urllib.parse


class FakeDaemon:
    """A threaded HTTP/1.1 keep-alive server on 127.0.0.1 (or a Unix socket).

    `routes[(method, path)](handler, query, body)` answers a request; `connections` counts the
    connections accepted and `requests` holds (method, path, body) of every request."""

    def __init__(self, unix_path=None):
        self.lock = threading.Lock()
        self.connections = 0
        self.requests = []
        self.routes = {}
        handler = type("Handler", (_FakeHandler,), {"fake": self})
        if unix_path:
            self.server = _UnixHTTPServer(unix_path, handler)
            self.url = "unix://" + unix_path
        else:
            self.server = _TCPHTTPServer(("127.0.0.1", 0), handler)
            self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def bodies(self, method, path):
        return [b for m, p, b in self.requests if (m, p) == (method, path)]


class _Quiet:
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client that closes a connection with an answer unread resets it: expected here


class _TCPHTTPServer(_Quiet, http.server.ThreadingHTTPServer):
    pass


class _UnixHTTPServer(_Quiet, socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    pass


class _FakeHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive unless a response says otherwise
    fake = None

    def setup(self):
        super().setup()
        if self.connection.family != socket.AF_UNIX:  # headers and body go in two writes
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.fake.lock:
            self.fake.connections += 1

    def log_message(self, *args):
        pass

    def _read_body(self):
        if self.headers.get("Transfer-Encoding") == "chunked":
            out = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                chunk = self.rfile.read(size + 2)[:size]
                if not size:
                    return out
                out += chunk
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _handle(self):
        url = urllib.parse.urlsplit(self.path)
        body = self._read_body()
        if self.headers.get("Content-Type") == "application/json":
            body = json.loads(body)
        with self.fake.lock:
            self.fake.requests.append((self.command, url.path, body))
        route = self.fake.routes.get((self.command, url.path))
        if route is None:
            self.send_json(404, {"error": {"code": "not_found", "message": f"no route {url.path}"}})
        else:
            route(self, dict(urllib.parse.parse_qsl(url.query)), body)

    do_GET = do_POST = do_PUT = do_DELETE = _handle

    def send_json(self, status, obj, drop_after=False):
        """Answer JSON; `drop_after` closes the connection without saying so first."""
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.close_connection = drop_after

    def send_ndjson(self, events):
        """Answer a chunked NDJSON stream, one chunk per event; a callable runs in between."""
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            if callable(event):
                event()
                continue
            line = json.dumps(event).encode() + b"\n"
            self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
        self.wfile.write(b"0\r\n\r\n")

    def send_empty(self, status=204):
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def send_bytes(self, data):
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
