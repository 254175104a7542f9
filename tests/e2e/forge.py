"""A stand-in forge for the egress-secret tests: one HTTPS server that speaks git's smart HTTP
(through `git http-backend`, the CGI git ships) for the repositories under a directory, and a
PEP 503 package index with the wheels of another; every request needs HTTP Basic credentials
whose password is the token given (any user name, or the token as the user with the password
x-oauth-basic, as GitHub takes it). Run inside the stand-in internet's namespace:

    python3 forge.py ADDR PORT CERT KEY TOKEN GIT_ROOT WHEEL_DIR LOG

Each request's path and whether its credentials held go to LOG, a line each."""

import base64
import http.server
import os
import socketserver
import ssl
import subprocess
import sys

addr, port, cert, key, token, git_root, wheels, log = sys.argv[1:9]


def authorized(header):
    if not header or not header.lower().startswith("basic "):
        return False
    try:
        user, _, password = base64.b64decode(header[6:].strip()).decode().partition(":")
    except ValueError:
        return False
    return password == token or (user == token and password == "x-oauth-basic")


class Forge(http.server.BaseHTTPRequestHandler):
    def answer(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)

    def handle_any(self):
        ok = authorized(self.headers.get("Authorization"))
        with open(log, "a") as f:
            f.write(f"{self.command} {self.path} {'ok' if ok else 'refused'}\n")
        if not ok:
            return self.answer(401, b"credentials, please\n",
                               [("WWW-Authenticate", 'Basic realm="forge"')])
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path, _, query = self.path.partition("?")
        if path.startswith("/simple/"):
            name = path.strip("/").split("/")[-1]
            links = "".join(f'<a href="/files/{w}">{w}</a>\n' for w in sorted(os.listdir(wheels))
                            if w.split("-")[0].replace("_", "-") == name)
            if not links:
                return self.answer(404)
            return self.answer(200, f"<html><body>\n{links}</body></html>\n".encode(),
                               [("Content-Type", "text/html")])
        if path.startswith("/files/"):
            with open(os.path.join(wheels, os.path.basename(path)), "rb") as f:
                return self.answer(200, f.read(), [("Content-Type", "application/octet-stream")])
        env = {"PATH": os.environ["PATH"], "GIT_PROJECT_ROOT": git_root,
               "GIT_HTTP_EXPORT_ALL": "1", "REMOTE_USER": "forge", "REQUEST_METHOD": self.command,
               "PATH_INFO": path, "QUERY_STRING": query, "CONTENT_LENGTH": str(len(body)),
               "CONTENT_TYPE": self.headers.get("Content-Type", "")}
        for h, e in (("Content-Encoding", "HTTP_CONTENT_ENCODING"), ("Git-Protocol", "GIT_PROTOCOL")):
            if self.headers.get(h):
                env[e] = self.headers[h]
        out = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True).stdout
        head, _, rest = out.partition(b"\r\n\r\n") if b"\r\n\r\n" in out else out.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode().splitlines():
            k, _, v = line.partition(":")
            if k.lower() == "status":
                status = int(v.split()[0])
            elif k:
                headers.append((k, v.strip()))
        self.answer(status, rest, headers)

    do_GET = do_POST = handle_any

    def log_message(self, *a):
        pass


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server((addr, int(port)), Forge)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(cert, key)
srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
