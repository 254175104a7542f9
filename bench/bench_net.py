#!/usr/bin/env python3
"""Networks: what a sandbox's network costs, each figure beside its baseline in the same run.

- create -> first exec of a base sandbox on a daemon with networks and on one without (--net off);
- a GET, the TCP connect and a download from a guest on port 80 of the stand-in internet
  (tests/e2e/internet.py) straight out under allow-all and through the proxy under a custom
  policy by name; the download also from the host itself;
- a name lookup in the guest through the daemon's resolver, beside one that needs no DNS;
- a GET and a download from a server in the guest through its port URL (sbx.url), from the host,
  beside the same request made inside the guest;
- an HTTPS GET and download with an egress secret's placeholder in a header, through the proxy
  that ends the guest's TLS and puts the value in, beside the same request straight out;
- with CPUOSD_BEFORE=PATH (a cpuosd built before the resolver and proxy moved to cpuos-netd), the
  split's cost: exec round trip, create -> first exec, an HTTP download through the proxy and an
  HTTPS GET and download with a secret, on this cpuosd and on that one side by side, alternating.
Run as root on a built tree: python3 bench/bench_net.py [N]; CPUOSD_BEFORE=PATH python3
bench/bench_net.py N split for the split alone. Prints figures; asserts nothing."""

import hashlib
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
    def __init__(self, *args, binary=None):
        self.dir = tempfile.mkdtemp(prefix="cpuos-bench-net-")
        os.chmod(self.dir, 0o711)  # for cpuosd, which gives up root, to reach its state
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.url = f"http://127.0.0.1:{self.port}"
        sock = os.path.join(self.dir, "run", "d.sock")  # made, so owned, by cpuosd
        self.proc = subprocess.Popen(
            [binary or os.path.join(ROOT, "build", "bin", "cpuosd"), "--state-dir", os.path.join(self.dir, "s"),
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


def ready(d):
    """Creates until one is restored from the base template snapshot (built on first use)."""
    for _ in range(300):
        d.create().kill()
        if b"(base, restored)" in open(os.path.join(d.dir, "log"), "rb").read():
            return
        time.sleep(1)


def create_ms(d, n=None):
    """n creates (default N) timed to their first exec, once the template snapshot is ready."""
    ready(d)
    return timed_creates(d, n or N)


def timed_creates(d, n):
    out = []
    for _ in range(n):
        t0 = time.monotonic()
        s = d.create()
        s.exec("true")
        out.append((time.monotonic() - t0) * 1000)
        s.kill()
    return out


def in_guest(sbx, cmd):
    """N runs of cmd in the guest, each timed there (ms)."""
    r = sbx.exec(f"for i in $(seq {N}); do s=$(date +%s%N); {cmd} >/dev/null; e=$(date +%s%N); "
                 f"echo $(( (e - s) / 1000 )); done", timeout="10m")
    return [int(x) / 1000 for x in r.stdout.split()]


def curl_stat(sbx, url, what, *opts):
    r = sbx.exec(f"for i in $(seq {N}); do curl -s -o /dev/null {' '.join(opts)} "
                 f"-w '%{{{what}}}\\n' {url}; done", timeout="10m")
    return [float(x) for x in r.stdout.split()]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_curl(url, what, token):
    return [float(subprocess.run(["curl", "-s", "-o", "/dev/null", "-H", f"cpuos-traffic-token: {token}",
                                  "-w", f"%{{{what}}}", url], capture_output=True, text=True).stdout)
            for _ in range(N)]


def port_urls(d):
    sbx = cpuos.Sandbox.create(template="python", timeout="10m", api_key=d.key, api_url=d.url)
    try:
        sbx.exec(f"mkdir -p /work/www && cd /work/www && echo hello > small && "
                 f"head -c {16 << 20} /dev/zero > big")
        sbx.exec("cd /work/www && python3 -m http.server 8000 --bind 0.0.0.0 >/dev/null 2>&1",
                 background=True)
        for _ in range(100):
            if sbx.exec("curl -s -o /dev/null http://127.0.0.1:8000/small").exit_code == 0:
                break
            time.sleep(0.2)
        url = sbx.url(8000).split("?")[0]
        t_u = p50(host_curl(url + "small", "time_total", sbx.traffic_token))
        t_g = p50(curl_stat(sbx, "http://127.0.0.1:8000/small", "time_total"))
        # The sandbox's namespace, entered from the host: the same path without the proxy.
        tag = hashlib.sha256(os.path.join(d.dir, "s").encode()).hexdigest()[:4]
        (ns,) = [n.split()[0] for n in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                       text=True).stdout.splitlines()
                 if n.startswith(f"cpuos-{tag}-")]
        def in_ns(path, what):
            return p50([float(subprocess.run(
                ["ip", "netns", "exec", ns, "curl", "-s", "-o", "/dev/null", "-w", f"%{{{what}}}",
                 "http://169.254.0.2:8000/" + path], capture_output=True, text=True).stdout)
                for _ in range(N)])
        t_n = in_ns("small", "time_total")
        print(f"GET of a small file from a server in the guest (p50): through its port URL from the "
              f"host {t_u * 1000:.1f} ms; from the host straight into its namespace (no proxy) "
              f"{t_n * 1000:.1f} ms ({t_u / t_n:.2f}x); inside the guest {t_g * 1000:.1f} ms "
              f"(TCG: curl itself runs slowly there)")
        v_u = p50(host_curl(url + "big", "speed_download", sbx.traffic_token)) / 1e6
        v_n = in_ns("big", "speed_download") / 1e6
        v_g = p50(curl_stat(sbx, "http://127.0.0.1:8000/big", "speed_download")) / 1e6
        print(f"  a 16 MiB download: {v_u:.0f} MB/s through the port URL, {v_n:.0f} MB/s straight "
              f"into the namespace ({v_u / v_n:.2f}x), {v_g:.0f} MB/s inside the guest")
    finally:
        sbx.kill()


def secrets(d, net):
    cpuos.Secret.set("BENCH_KEY", "bench-value", ["allowed.test"], api_key=d.key, api_url=d.url)
    plain, held = d.create(network="allow-all"), d.create(network="allow-all", secrets=["BENCH_KEY"])
    try:
        url, big = "https://allowed.test/headers", f"https://allowed.test/bytes/{16 << 20}"
        hdr = "-H \"X-Key: $BENCH_KEY\""
        # The straight one checks the stand-in's self-signed certificate against the system
        # bundle with it added, as the other checks the proxy's against the bundle with the
        # daemon's CA: the same verification work on both sides.
        with open(net.cert) as f:
            plain.files.write("/tmp/stand-in.pem", f.read())
        plain.exec("cat /etc/ssl/certs/ca-certificates.crt /tmp/stand-in.pem > /tmp/roots.pem")
        t_s = p50(curl_stat(held, url, "time_total", hdr))
        t_p = p50(curl_stat(plain, url, "time_total", "--cacert /tmp/roots.pem", hdr))
        print(f"HTTPS GET with a secret's placeholder in a header (p50): through the proxy, which "
              f"ends TLS and puts the value in, {t_s * 1000:.1f} ms; straight out (allow-all, no "
              f"secrets) {t_p * 1000:.1f} ms ({t_s / t_p:.2f}x)")
        v_s = p50(curl_stat(held, big, "speed_download", hdr)) / 1e6
        v_p = p50(curl_stat(plain, big, "speed_download", "--cacert /tmp/roots.pem", hdr)) / 1e6
        print(f"  a 16 MiB HTTPS download: {v_s:.0f} MB/s through the proxy, {v_p:.0f} MB/s "
              f"straight ({v_s / v_p:.2f}x)")
    finally:
        plain.kill()
        held.kill()


def split(before, net):
    """This cpuosd (resolver and proxy in cpuos-netd) beside the one at before (in cpuosd),
    each measure taken on both in turn."""
    args = ("--dns-upstream", f"{DNS_ADDR}:{DNS_PORT}", "--url-listen", "none",
            "--egress-trust", net.cert)
    both = {"after": Daemon("--net-range", "10.250.16.0/20", *args),
            "before": Daemon("--net-range", "10.250.32.0/20", *args, binary=before)}
    name, pin = "allowed.test", f"--resolve allowed.test:80:{ADDRS[0]}"
    got = {k: {} for k in both}
    made = []
    try:
        for k, d in both.items():
            ready(d)
        for _ in range(2):  # alternating halves, so drift falls on both
            for k, d in both.items():
                got[k].setdefault("create", []).extend(timed_creates(d, max(1, N // 2)))
        for k, d in both.items():
            cpuos.Secret.set("BENCH_KEY", "bench-value", ["allowed.test"], api_key=d.key, api_url=d.url)
            byname = d.create(network={"mode": "custom", "allowedHosts": [name]})
            held = d.create(network="allow-all", secrets=["BENCH_KEY"])
            made += [byname, held]
            byname.exec(f"getent ahostsv4 {name}")
            got[k]["boxes"] = (byname, held)
        hdr = "-H \"X-Key: $BENCH_KEY\""
        for _ in range(2):
            for k in both:
                byname, held = got[k]["boxes"]
                t = []
                for _ in range(max(1, N // 2) * 10):
                    t0 = time.monotonic()
                    byname.exec("true")
                    t.append((time.monotonic() - t0) * 1000)
                got[k].setdefault("exec", []).extend(t)
                got[k].setdefault("http", []).extend(
                    curl_stat(byname, f"http://{name}/bytes/{BIG}", "speed_download", pin))
                got[k].setdefault("tls", []).extend(
                    curl_stat(held, "https://allowed.test/headers", "time_total", hdr))
                got[k].setdefault("tls_dl", []).extend(
                    curl_stat(held, f"https://allowed.test/bytes/{16 << 20}", "speed_download", hdr))
        rows = [("exec round trip (p50)", "exec", 1, "ms"),
                ("create -> first exec (base, restored, p50)", "create", 1, "ms"),
                (f"HTTP download of {BIG >> 20} MiB through the proxy (p50)", "http", 1e-6, "MB/s"),
                ("HTTPS GET with a secret, through the proxy (p50)", "tls", 1000, "ms"),
                ("16 MiB HTTPS download with a secret (p50)", "tls_dl", 1e-6, "MB/s")]
        print("the netd split, side by side (after: cpuos-netd; before: " + before + "):")
        for label, key, scale, unit in rows:
            a, b = p50(got["after"][key]) * scale, p50(got["before"][key]) * scale
            print(f"  {label}: after {a:.1f} {unit}, before {b:.1f} {unit} ({a / b:.3f}x)")
    finally:
        for sbx in made:
            sbx.kill()
        for d in both.values():
            d.stop()


def main():
    net = Internet().start()
    before = os.environ.get("CPUOSD_BEFORE")
    if before and sys.argv[2:3] == ["split"]:
        try:
            split(before, net)
        finally:
            net.stop()
        return
    on = Daemon("--net-range", "10.250.0.0/20", "--dns-upstream", f"{DNS_ADDR}:{DNS_PORT}",
                "--url-listen", f"127.0.0.1:{free_port()}", "--egress-trust", net.cert)
    off = Daemon("--net", "off", "--url-listen", "none")
    a_ip, name = ADDRS[0], "allowed.test"
    pin = f"--resolve {name}:80:{a_ip}"
    try:
        a, b = create_ms(on), create_ms(off)
        print(f"create -> first exec (base, restored, {N}x, p50): with a network {p50(a):.0f} ms, "
              f"without (--net off) {p50(b):.0f} ms: the network adds {p50(a) - p50(b):.0f} ms")
        direct = on.create(network="allow-all")
        byname = on.create(network={"mode": "custom", "allowedHosts": [name]})
        try:
            byname.exec(f"getent ahostsv4 {name}")  # opens its address for the proxy
            small = f"http://{name}/"
            big = f"http://{name}/bytes/{BIG}"
            t_d = p50(curl_stat(direct, small, "time_total", pin))
            t_p = p50(curl_stat(byname, small, "time_total", pin))
            print(f"GET / on port 80 from the guest (p50): allow-all, straight out {t_d * 1000:.1f} ms; "
                  f"custom by name, through the proxy {t_p * 1000:.1f} ms ({t_p / t_d:.2f}x)")
            c_d = p50(curl_stat(direct, small, "time_connect", pin))
            c_p = p50(curl_stat(byname, small, "time_connect", pin))
            print(f"  TCP connect as the guest sees it: {c_d * 1000:.1f} ms straight, "
                  f"{c_p * 1000:.1f} ms to the proxy")
            v_d = p50(curl_stat(direct, big, "speed_download", pin)) / 1e6
            v_p = p50(curl_stat(byname, big, "speed_download", pin)) / 1e6
            print(f"download of {BIG >> 20} MiB (p50): straight {v_d:.0f} MB/s, through the proxy "
                  f"{v_p:.0f} MB/s ({v_p / v_d:.2f}x)")
            host = p50([float(subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{speed_download}",
                                              f"http://{a_ip}/bytes/{BIG}"], capture_output=True,
                                             text=True).stdout) for _ in range(3)]) / 1e6
            print(f"  the same download from the host itself: {host:.0f} MB/s (TCG guest: "
                  f"{v_d / host:.2f}x of it)")
            base = p50(in_guest(direct, "getent hosts localhost"))
            l_d = p50(in_guest(direct, f"getent ahostsv4 {name}"))
            l_p = p50(in_guest(byname, f"getent ahostsv4 {name}"))
            print(f"name lookup in the guest (p50): {l_d:.1f} ms under allow-all, {l_p:.1f} ms under "
                  f"custom (which also opens the address: one nft run); a lookup of localhost, no DNS, "
                  f"takes {base:.1f} ms")
        finally:
            direct.kill()
            byname.kill()
        port_urls(on)
        secrets(on, net)
        if before:
            split(before, net)
    finally:
        on.stop()
        off.stop()
        net.stop()


if __name__ == "__main__":
    main()
