"""A stand-in for the internet: a network namespace the tests create, reached
from the host through a veth pair, with HTTP servers on a few addresses of the
benchmarking range 198.18.0.0/15 (never routed on the real internet).

Each server answers every request with `<address> <Host header> <client>`,
so a test sees which address it reached and by which name. A DNS server on
DNS_ADDR:DNS_PORT (dnslib) answers the names in ZONE; a daemon points its
resolver there with --dns-upstream."""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

NS = f"cpit{os.getpid() % 100000}"
HOST_SIDE = "198.18.0.1"          # the root namespace's end: a host address
ADDRS = ["198.18.0.2", "198.18.0.3", "198.18.0.4"]
SPARE = "198.18.0.5"               # on the interface, but served only by what a test starts there
PORT = 8080
WEB_PORTS = (80, 443)  # also served, 443 with TLS (a self-signed certificate: self.cert)
DNS_ADDR, DNS_PORT = "198.18.0.2", 5353
# name -> A records; "*.x" answers every name under x
ZONE = {
    "allowed.test": ["198.18.0.2"],
    "other.test": ["198.18.0.3"],
    "*.wild.test": ["198.18.0.4"],
    "wild.test": ["198.18.0.4"],
    "rebind.test": ["127.0.0.1"],
    "meta.test": ["169.254.169.254"],
    "private.test": ["10.9.9.9"],
    "mixed.test": ["127.0.0.1", "198.18.0.3"],
    "dns.google": ["198.18.0.4"],
    "host.test": ["198.18.0.1"],  # the host's own address
    "git.test": [SPARE],
    "pypi.test": [SPARE],
}

DNS_SERVER = r"""
import json, sys
from dnslib import A, QTYPE, RCODE, RR
from dnslib.server import BaseResolver, DNSServer
zone = json.loads(sys.argv[3])
class R(BaseResolver):
    def resolve(self, request, handler):
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        addrs = zone.get(name)
        labels = name.split(".")
        for i in range(1, len(labels)):
            if addrs is None:
                addrs = zone.get("*." + ".".join(labels[i:]))
        if addrs is None:
            reply.header.rcode = RCODE.NXDOMAIN
        elif request.q.qtype in (QTYPE.A, QTYPE.ANY):
            for a in addrs:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(a), ttl=60))
        return reply
DNSServer(R(), address=sys.argv[1], port=int(sys.argv[2])).start()
"""

SERVER = r"""
import http.server, socketserver, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps connections open: what a CDN does
    def do_GET(self):
        if self.path == "/headers":  # what came, hashed: a secret's value is not echoed
            import hashlib, json
            seen = {k.lower(): hashlib.sha256(v.encode()).hexdigest() for k, v in self.headers.items()}
            body = json.dumps(seen).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.startswith("/bytes/"):  # /bytes/N: N zero bytes, for throughput
            n = int(self.path[7:])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = bytes(1 << 16)
            while n > 0:
                self.wfile.write(chunk[:min(n, len(chunk))])
                n -= len(chunk)
            return
        body = f"{self.server.server_address[0]} {self.headers.get('Host')} {self.client_address[0]}\n".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
srv = S((sys.argv[1], int(sys.argv[2])), H)
if len(sys.argv) > 3:  # HTTPS: a certificate and its key
    import ssl
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
srv.serve_forever()
"""


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def _answers(addr):
    try:
        for port in (PORT, *WEB_PORTS):
            with socket.create_connection((addr, port), timeout=1):
                pass
        return True
    except OSError:
        return False


class Internet:
    def __init__(self):
        self.procs = []
        self.dir = None

    def start(self):
        self.stop()
        _ip("netns", "add", NS)
        _ip("link", "add", f"{NS}h", "type", "veth", "peer", "name", "eth0", "netns", NS)
        _ip("addr", "add", f"{HOST_SIDE}/24", "dev", f"{NS}h")
        _ip("link", "set", f"{NS}h", "up")
        for a in (*ADDRS, SPARE):
            _ip("-n", NS, "addr", "add", f"{a}/24", "dev", "eth0")
        _ip("-n", NS, "link", "set", "eth0", "up")
        _ip("-n", NS, "link", "set", "lo", "up")
        _ip("-n", NS, "route", "add", "default", "via", HOST_SIDE)
        self.dir = tempfile.mkdtemp(prefix="cpuos-internet-")
        cert, key = os.path.join(self.dir, "cert.pem"), os.path.join(self.dir, "key.pem")
        self.cert, self.key = cert, key
        # Names servers are checked by when the daemon's proxy ends TLS (--egress-trust
        # self.cert): not "wild.test" itself.
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                        "-subj", "/CN=allowed.test", "-addext",
                        "subjectAltName=DNS:allowed.test,DNS:other.test,DNS:*.wild.test,DNS:git.test,"
                        "DNS:pypi.test",
                        "-keyout", key, "-out", cert],
                       capture_output=True, check=True)
        for a in ADDRS:
            for port, tls in ((PORT, []), (80, []), (443, [cert, key])):
                self.procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", NS, "python3", "-c", SERVER, a, str(port), *tls],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.procs.append(subprocess.Popen(
            ["ip", "netns", "exec", NS, "python3", "-c", DNS_SERVER, DNS_ADDR, str(DNS_PORT),
             json.dumps(ZONE)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # Up once each answers from the host side.
        deadline = time.monotonic() + 20
        for a in ADDRS:
            while not _answers(a):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the stand-in internet server on {a} did not start")
                time.sleep(0.1)
        return self

    def spawn(self, *argv):
        """A process started inside the namespace (stopped with the rest)."""
        p = subprocess.Popen(["ip", "netns", "exec", NS, *argv], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.procs.append(p)
        return p

    def stop(self):
        for p in self.procs:
            p.kill()
            p.wait()
        self.procs = []
        _ip("link", "delete", f"{NS}h", check=False)
        _ip("netns", "delete", NS, check=False)
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def running():
    """For a module's fixture: yields a started Internet, stopped after (`yield from running()`)."""
    net = Internet().start()
    try:
        yield net
    finally:
        net.stop()
