#!/usr/bin/env python3
"""Networks: what a sandbox's network costs, each figure beside its baseline in the same run.

- create -> first exec of a base sandbox on a daemon with networks and on one without (--net off);
- TCP connection setup and throughput from a guest to the stand-in internet (tests/e2e/internet.py)
  under allow-all, under a custom policy by CIDR and by name (the resolver's "resolved" set), against
  the same from the host itself;
- a name lookup through the daemon's resolver against the same from the host.
Run as root on a built tree: python3 bench/bench_net.py [N]. Prints figures; asserts nothing."""

import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "sdk", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import cpuos  # noqa: E402
from internet import ADDRS, DNS_ADDR, DNS_PORT, PORT, Internet  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 10
BIG = 64 << 20
GUEST_DIR = os.environ.get("CPUOS_GUEST_DIR", os.path.join(ROOT, "build", "guest"))


class Daemon:
    def __init__(self, *args):
        self.dir = tempfile.mkdtemp(prefix="cpuos-bench-net-")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{self.port}"
        sock = os.path.join(self.dir, "d.sock")
        self.proc = subprocess.Popen(
            [os.path.join(ROOT, "build", "bin", "cpuosd"), "--state-dir", os.path.join(self.dir, "s"),
             "--socket", sock, "--listen", f"127.0.0.1:{self.port}", "--guest-dir", GUEST_DIR,
             "--pool-python", "0", *args],
            stdout=open(os.path.join(self.dir, "log"), "wb"), stderr=subprocess.STDOUT)
        for _ in range(300):
            try:
                urllib.request.urlopen(self.url + "/v1/health", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        out = subprocess.run(["curl", "-s", "--unix-socket", sock, "-X", "POST", "http://x/v1/keys",
                              "-d", '{"name":"bench"}'], capture_output=True, text=True).stdout
        self.key = json.loads(out)["key"]

    def create(self, **kw):
        return cpuos.Sandbox.create(template="base", timeout="10m", api_key=self.key,
                                    api_url=self.url, **kw)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)


def p50(xs):
    return statistics.median(xs)


def create_ms(d):
    d.create().kill()  # the first builds the template snapshot
    out = []
    for _ in range(N):
        t0 = time.monotonic()
        s = d.create()
        s.exec("true")
        out.append((time.monotonic() - t0) * 1000)
        s.kill()
    return out


def guest_curl(sbx, url, what):
    r = sbx.exec(f"for i in $(seq {N}); do curl -s -o /dev/null -w '%{{{what}}}\\n' {url}; done",
                 timeout="5m")
    return [float(x) * (1000 if what.startswith("time") else 1) for x in r.stdout.split()]


def host_curl(url, what):
    out = []
    for _ in range(N):
        r = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", f"%{{{what}}}", url],
                           capture_output=True, text=True)
        out.append(float(r.stdout) * (1000 if what.startswith("time") else 1))
    return out


def main():
    net = Internet().start()
    on = Daemon("--net-range", "10.250.0.0/20", "--dns-upstream", f"{DNS_ADDR}:{DNS_PORT}")
    off = Daemon("--net", "off")
    try:
        a, b = create_ms(on), create_ms(off)
        print(f"create -> first exec (base, {N}x, p50): with a network {p50(a):.0f} ms, "
              f"without {p50(b):.0f} ms: the network adds {p50(a) - p50(b):.0f} ms")
        url = f"http://{ADDRS[0]}:{PORT}/"
        big = f"http://{ADDRS[0]}:{PORT}/bytes/{BIG}"
        host_c = p50(host_curl(url, "time_connect"))
        host_t = p50(host_curl(big, "speed_download")) / 1e6
        print(f"host -> internet: connect {host_c:.2f} ms, download {host_t:.0f} MB/s (baseline)")
        policies = [("allow-all", "allow-all", ADDRS[0]),
                    ("custom, by CIDR", {"mode": "custom", "allowedCIDRs": [f"{ADDRS[0]}/32"]}, ADDRS[0]),
                    ("custom, by name", {"mode": "custom", "allowedHosts": ["allowed.test"]}, "allowed.test")]
        for name, pol, host in policies:
            s = on.create(network=pol)
            try:
                c = p50(guest_curl(s, f"http://{host}:{PORT}/", "time_connect"))
                t = p50(guest_curl(s, f"http://{host}:{PORT}/bytes/{BIG}", "speed_download")) / 1e6
                print(f"guest -> internet, {name}: connect {c:.2f} ms ({c / host_c:.1f}x the host), "
                      f"download {t:.0f} MB/s ({t / host_t:.2f}x the host)")
                if host != ADDRS[0]:
                    r = s.exec(f"for i in $(seq {N}); do s=$(date +%s%N); getent ahostsv4 {host} >/dev/null; "
                               f"e=$(date +%s%N); echo $(( (e - s) / 1000 )); done")
                    us = [int(x) for x in r.stdout.split()]
                    print(f"  name lookup in the guest through cpuosd's resolver: p50 {p50(us) / 1000:.1f} ms")
            finally:
                s.kill()
    finally:
        on.stop()
        off.stop()
        net.stop()


if __name__ == "__main__":
    main()
