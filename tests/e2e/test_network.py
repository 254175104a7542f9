"""Networks against a real cpuosd: every sandbox in a network namespace of its own, egress policies
enforced on the host (allow-all, deny-all, custom with CIDR allows and denies that win, host names
through the daemon's resolver), changed live, kept across pause/resume and given to forks; the host,
link-local and metadata addresses, IPv6, DNS rebinding and resolver bypasses out of reach. The
"internet" is a network namespace the tests create (internet.py): 198.18.0.2-4, port 8080, each
answering with the address it was reached on, and a DNS server for *.test names."""

import os
import queue
import secrets
import socket
import subprocess
import threading
import time

import pytest

import cpuos
from conftest import SLOW, started_daemon, sandbox_factory
from internet import ADDRS, DNS_ADDR, DNS_PORT, HOST_SIDE, NS, PORT, running
from test_cpuos_cli import cpuos as cli

A, B, C = ADDRS


@pytest.fixture(scope="module")
def internet():
    yield from running()


@pytest.fixture(scope="module")
def netd(internet):
    """A daemon whose guests' resolver asks the stand-in internet's DNS server."""
    yield from started_daemon("--dns-upstream", f"{DNS_ADDR}:{DNS_PORT}",
                              "--net-default", "allow-all", key="net")


@pytest.fixture
def make_sandbox(netd):
    yield from sandbox_factory(netd)


def sh(sbx, cmd, ok=True):
    r = sbx.exec(cmd, timeout="60s")
    if ok:
        assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r


def fetch(sbx, addr, port=PORT):
    """curl from the guest: (exit code, body, seconds). 7 is 'connection refused'."""
    r = sh(sbx, f"curl -s -m 10 -w ' %{{time_total}}' http://{addr}:{port}/", ok=False)
    body, _, secs = r.stdout.rpartition(" ")
    return r.exit_code, body.strip(), float(secs or 0)


def reaches(sbx, addr, port=PORT):
    code, body, _ = fetch(sbx, addr, port)
    return code == 0 and body.startswith(addr)


def refused(sbx, addr, port=PORT):
    """Refused at once (a reset or an ICMP error), not left to time out."""
    code, _, secs = fetch(sbx, addr, port)
    return code == 7 and secs < 3 * SLOW


def counters(netd, sbx):
    r = netd.http("GET", f"/v1/sandboxes/{sbx.id}/network", key=netd.key_a)
    assert r.status == 200, r
    return r.json()


def test_allow_all_reaches_the_internet(make_sandbox):
    sbx = make_sandbox(network="allow-all")
    assert reaches(sbx, A)
    assert sbx.info().network == {"mode": "allow-all"}


def test_the_default_policy_applies_to_a_sandbox_that_names_none(make_sandbox):
    sbx = make_sandbox()
    assert sbx.info().network == {"mode": "allow-all"}  # the daemon's default
    assert reaches(sbx, A)


def test_deny_all_refuses_at_once_and_counts(netd, make_sandbox):
    sbx = make_sandbox(network="deny-all")
    assert refused(sbx, A)
    assert counters(netd, sbx)["refused_packets"] >= 1
    metrics = netd.http("GET", "/metrics", key=netd.key_a).body.decode()
    line = [x for x in metrics.splitlines()
            if x.startswith(f'cpuos_sandbox_egress_refused_packets{{sandbox="{sbx.id}"}}')]
    assert line and int(line[0].split()[-1]) >= 1, metrics[-600:]


def test_custom_cidrs_and_denied_cidrs_win(make_sandbox):
    sbx = make_sandbox(network={"mode": "custom", "allowedCIDRs": ["198.18.0.0/24"],
                                "deniedCIDRs": [f"{B}/32"]})
    assert reaches(sbx, A)
    assert refused(sbx, B)          # denied beats allowed
    sbx.set_network({"mode": "custom", "allowedCIDRs": [f"{C}/32"]})
    assert reaches(sbx, C) and refused(sbx, A)  # only what is listed


def test_a_live_change_needs_no_restart(make_sandbox):
    sbx = make_sandbox(network="deny-all")
    boot = sh(sbx, "cat /proc/sys/kernel/random/boot_id").stdout
    assert refused(sbx, A)
    sbx.set_network("allow-all")
    assert reaches(sbx, A)
    sbx.set_network("deny-all")
    assert refused(sbx, A)
    assert sh(sbx, "cat /proc/sys/kernel/random/boot_id").stdout == boot


def test_bad_policies_are_422(netd):
    for bad, why in [({"mode": "custom"}, "at least one"),
                     ({"mode": "allow-all", "allowedHosts": ["a.com"]}, "custom"),
                     ({"mode": "custom", "allowedCIDRs": ["10.0.0.1/8"]}, "10.0.0.1/8"),
                     ({"mode": "custom", "allowedHosts": ["*.a..com"]}, "*.a..com"),
                     ({"mode": "sometimes"}, "mode")]:
        r = netd.http("POST", "/v1/sandboxes", key=netd.key_a,
                      body={"template": "base", "network": bad})
        assert r.status == 422 and why in r.json()["error"]["message"], (bad, r)


def test_the_host_and_link_local_are_out_of_reach(make_sandbox):
    """Under allow-all: a service of the host (on its address toward the stand-in internet), the
    host's end of the sandbox's own link, the metadata address, and IPv6."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    accepted = []
    threading.Thread(target=_accept_into, args=(srv, accepted), daemon=True).start()
    try:
        sbx = make_sandbox(network="allow-all")
        assert refused(sbx, HOST_SIDE, port)
        gw = sh(sbx, "awk '$2 == \"00000000\" {print $3}' /proc/net/route").stdout.strip()
        assert gw  # the guest has a default route
        assert refused(sbx, "169.254.169.254", 80)
        assert refused(sbx, "169.254.0.1", port)  # the gateway itself serves nothing
        r = sh(sbx, "curl -s -m 5 -6 'http://[2001:db8::1]:8080/'", ok=False)
        assert r.exit_code != 0
        assert not accepted
    finally:
        srv.close()


def _accept_into(srv, accepted):
    try:
        accepted.append(srv.accept())
    except OSError:  # closed at the end of the test, nothing came
        pass


def test_networks_survive_pause_and_resume(make_sandbox):
    sbx = make_sandbox(network={"mode": "custom", "allowedCIDRs": [f"{A}/32"]})
    assert reaches(sbx, A)
    sbx.pause()
    assert reaches(sbx, A) and refused(sbx, B)  # resumed by the exec, policy kept
    sbx.pause()
    sbx.set_network("allow-all")                 # paused: applies at the resume
    assert reaches(sbx, B)


def test_forks_have_networks_of_their_own(netd, make_sandbox):
    parent = make_sandbox(network={"mode": "custom", "allowedCIDRs": [f"{A}/32"]})
    assert reaches(parent, A)
    kids = parent.fork(count=2)
    try:
        assert kids[0].info().network == parent.info().network
        before = [counters(netd, k)["allowed_flows"] for k in kids]
        assert reaches(kids[0], A) and refused(kids[0], B)
        after = [counters(netd, k)["allowed_flows"] for k in kids]
        # the first child's connection went out through its own namespace only
        assert after[0] > before[0] and after[1] == before[1], (before, after)
        assert reaches(kids[1], A)
        kids[1].set_network("deny-all")          # one child's policy is its own
        assert refused(kids[1], A) and reaches(kids[0], A)
    finally:
        for k in kids:
            k.kill()


def test_networks_are_released(make_sandbox):
    """A namespace is held while the VM runs, not while paused or after a kill."""
    before = set(os.listdir("/run/netns"))
    sbx = make_sandbox()
    during = set(os.listdir("/run/netns")) - before
    assert len(during) == 1, during
    sbx.pause()
    assert not (set(os.listdir("/run/netns")) & during)
    sh(sbx, "true")
    sbx.kill()
    time.sleep(0.5)
    assert not (set(os.listdir("/run/netns")) - before)


def resolve(sbx, name):
    """The guest's IPv4 answers for name (its libc asks the daemon's resolver)."""
    out = sh(sbx, f"getent ahostsv4 {name} | awk '{{print $1}}' | sort -u", ok=False).stdout
    return out.split()


def test_allowed_hosts_by_name_with_wildcards(make_sandbox):
    sbx = make_sandbox(network={"mode": "custom", "allowedHosts": ["allowed.test", "*.wild.test"]})
    assert resolve(sbx, "allowed.test") == [A]
    assert resolve(sbx, "a.wild.test") == [C] and resolve(sbx, "x.y.wild.test") == [C]
    assert resolve(sbx, "wild.test") == []       # *.domain is not the bare domain
    assert resolve(sbx, "other.test") == []      # not listed
    assert web(sbx, "http://allowed.test/") == (0, f"{A} allowed.test {HOST_SIDE}")
    assert web(sbx, "https://a.wild.test/")[1].startswith(f"{C} a.wild.test")
    assert fetch(sbx, "other.test")[0] == 6      # curl: could not resolve
    assert refused(sbx, B)                       # its address, named by no allowed host
    # a name opens its web ports only, through the proxy: no other port, no UDP
    assert refused(sbx, "allowed.test", PORT)


def test_names_may_not_point_inside(make_sandbox):
    """DNS rebinding: an allowed name whose answer is loopback, metadata or private gets none of
    those addresses (private ones only when allowedCIDRs names them)."""
    hosts = ["rebind.test", "meta.test", "private.test", "mixed.test"]
    sbx = make_sandbox(network={"mode": "custom", "allowedHosts": hosts})
    assert resolve(sbx, "rebind.test") == []
    assert resolve(sbx, "meta.test") == []
    assert resolve(sbx, "private.test") == []
    assert resolve(sbx, "mixed.test") == [B]
    sbx.set_network({"mode": "custom", "allowedHosts": hosts, "allowedCIDRs": ["10.9.0.0/16"]})
    assert resolve(sbx, "private.test") == ["10.9.9.9"]
    assert resolve(sbx, "rebind.test") == []     # never loopback


# A DNS query for allowed.test sent straight to another resolver.
PROBE = r"""
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
s.connect(("ADDR", PORT))
try:
    s.send(b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07allowed\x04test\x00\x00\x01\x00\x01")
    s.recv(512)
    print("answered")
except OSError as e:
    print("failed", type(e).__name__)
"""


def test_resolver_bypasses_fail(make_sandbox):
    """DNS over TCP to the gateway, DNS to another resolver, and a DNS-over-HTTPS endpoint that
    only a wildcard would allow."""
    sbx = make_sandbox(template="python",
                       network={"mode": "custom", "allowedHosts": ["*"]})
    probe = PROBE.replace("ADDR", DNS_ADDR).replace("PORT", str(DNS_PORT))
    sbx.files.write("/tmp/probe.py", probe)
    assert sh(sbx, "python3 /tmp/probe.py").stdout.startswith("failed")
    sbx.set_network({"mode": "custom", "allowedHosts": ["*"], "allowedCIDRs": [f"{DNS_ADDR}/32"]})
    assert sh(sbx, "python3 /tmp/probe.py").stdout.startswith("answered")  # the probe works
    sbx.set_network({"mode": "custom", "allowedHosts": ["*"]})
    r = sh(sbx, "timeout 5 bash -c 'exec 3<>/dev/tcp/169.254.0.1/53' 2>&1; echo rc=$?", ok=False)
    assert "rc=0" not in r.stdout, r.stdout   # no DNS over TCP
    assert resolve(sbx, "allowed.test") == [A]    # "*": any name ...
    assert resolve(sbx, "dns.google") == []      # ... but not a DoH endpoint
    sbx.set_network({"mode": "custom", "allowedHosts": ["dns.google"]})
    assert resolve(sbx, "dns.google") == [C]     # named exactly: allowed


def test_a_policy_change_forgets_the_names_of_the_old(make_sandbox):
    sbx = make_sandbox(network={"mode": "custom", "allowedHosts": ["allowed.test"]})
    assert web(sbx, "http://allowed.test/")[0] == 0
    sbx.set_network({"mode": "custom", "allowedHosts": ["other.test"]})
    assert web(sbx, "http://allowed.test/", f"--resolve allowed.test:80:{A}")[0] != 0
    assert fetch(sbx, "allowed.test")[0] == 6
    assert web(sbx, "http://other.test/")[0] == 0


def test_a_policy_change_ends_what_it_no_longer_allows(make_sandbox):
    """A connection the old policy let out is cut by a new one that does not allow it."""
    sbx = make_sandbox(template="python", network="allow-all")
    hold = PROBE_HOLD.replace("ADDR", A).replace("PORT", str(PORT))
    sbx.files.write("/tmp/hold.py", hold)
    proc = sbx.exec("python3 /tmp/hold.py", background=True)
    deadline = time.monotonic() + 60 * SLOW
    while "ok" not in sh(sbx, "cat /tmp/hold.out 2>/dev/null", ok=False).stdout:
        assert time.monotonic() < deadline, "the connection never got going"
        time.sleep(0.5)  # a python start under TCG takes seconds
    sbx.set_network("deny-all")
    proc.wait(timeout=60)
    out = sh(sbx, "cat /tmp/hold.out").stdout
    assert "ok" in out and "cut" in out and "never" not in out, out


# Opens one keep-alive connection and sends a request on it every half second until it fails.
PROBE_HOLD = r"""
import http.client, time
c = http.client.HTTPConnection("ADDR", PORT, timeout=5)
out = open("/tmp/hold.out", "w")
try:
    for i in range(60):
        c.request("GET", "/")
        c.getresponse().read()
        out.write("ok\n"); out.flush()
        time.sleep(0.5)
    out.write("never cut\n")
except Exception as e:
    out.write(f"cut {type(e).__name__}\n")
out.close()
"""


def test_the_cli_shows_and_changes_a_policy(netd, make_sandbox):
    sbx = make_sandbox(network="deny-all")
    r = cli(netd, "net", sbx.id, "--allow-cidr", f"{A}/32", "--deny-cidr", f"{B}/32", key=netd.key_a)
    assert r.returncode == 0, r.stderr
    assert reaches(sbx, A) and refused(sbx, B)
    r = cli(netd, "net", "--json", sbx.id, key=netd.key_a)
    assert r.returncode == 0 and '"allowedCIDRs"' in r.stdout.decode(), r
    r = cli(netd, "net", sbx.id, "--allow-cidr", "10.0.0.1/8", key=netd.key_a)
    assert r.returncode == 1 and b"10.0.0.1/8" in r.stderr and len(r.stderr.splitlines()) == 1, r
    r = cli(netd, "create", "-T", "base", "--network", "deny-all", key=netd.key_a)
    assert r.returncode == 0, r.stderr
    made = cpuos.Sandbox.connect(r.stdout.decode().strip(), api_key=netd.key_a, api_url=netd.url)
    try:
        assert made.network == {"mode": "deny-all"}
    finally:
        made.kill()


def web(sbx, url, *opts):
    """curl of a web port (80/443, which the host proxies for names): (exit code, body)."""
    r = sh(sbx, f"curl -s -k -m 10 {' '.join(opts)} {url}", ok=False)
    return r.exit_code, r.stdout.strip()


def test_web_ports_pass_only_under_the_name_looked_up(make_sandbox):
    """HTTP and HTTPS to an allowed name go through the host's proxy, which checks the Host header
    or the TLS SNI against the policy and against the addresses that very name resolved to."""
    sbx = make_sandbox(network={"mode": "custom", "allowedHosts": ["allowed.test", "mixed.test"]})
    assert web(sbx, "http://allowed.test/") == (0, f"{A} allowed.test {HOST_SIDE}")
    code, body = web(sbx, "https://allowed.test/")
    assert code == 0 and body.startswith(f"{A} allowed.test"), (code, body)
    # a Host or an SNI other than the name looked up
    assert web(sbx, "http://allowed.test/", "-H 'Host: other.test'")[0] != 0
    assert web(sbx, "https://other.test/", f"--resolve other.test:443:{A}")[0] != 0
    # the name's own Host and SNI, at an address only another name resolved to (a shared CDN
    # address): that address is open for mixed.test, not for allowed.test
    assert resolve(sbx, "mixed.test") == [B]
    assert web(sbx, "https://allowed.test/", f"--resolve allowed.test:443:{B}")[0] != 0
    assert web(sbx, "http://allowed.test/", f"--resolve allowed.test:80:{B}")[0] != 0
    code, body = web(sbx, "https://mixed.test/")
    assert code == 0 and body.startswith(f"{B} mixed.test"), (code, body)
    # allow-all needs no proxy: any Host goes
    sbx.set_network("allow-all")
    assert web(sbx, f"http://{A}/", "-H 'Host: other.test'") == (0, f"{A} other.test {HOST_SIDE}")


KEEP_ALIVE = r"""
import socket
def ask(s, host):
    s.sendall(b"GET / HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
    got = b""
    while b"\r\n\r\n" not in got or len(got.split(b"\r\n\r\n", 1)[1]) < want(got):
        more = s.recv(4096)
        if not more:
            break
        got += more
    return got
def want(got):
    for line in got.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0
s = socket.create_connection(("allowed.test", 80), timeout=10)
first = ask(s, b"allowed.test")
try:
    second = ask(s, b"other.test")  # the same connection, another Host
except OSError as e:
    second = repr(e).encode()
print(repr(first), "|", repr(second))
"""


def test_a_kept_alive_connection_cannot_switch_host(make_sandbox):
    """A server that keeps connections open (as a CDN does) would take a second request on the
    same connection for another Host: the proxy passes one request per plain-HTTP connection."""
    sbx = make_sandbox(template="python",
                       network={"mode": "custom", "allowedHosts": ["allowed.test"]})
    sbx.files.write("/work/ka.py", KEEP_ALIVE)
    out = sh(sbx, "python3 /work/ka.py").stdout
    first, second = out.split(" | ")
    assert f"{A} allowed.test" in first, out
    assert "other.test" not in second, out
    # Without the proxy (allow-all) the same server does take the second request.
    sbx.set_network("allow-all")
    sbx.files.write("/work/ka.py", KEEP_ALIVE.replace('"allowed.test", 80', f'"{A}", 80'))
    assert f"{A} other.test" in sh(sbx, "python3 /work/ka.py").stdout


def test_a_name_of_the_host_does_not_reach_it(make_sandbox):
    """An allowed name that resolves to the host's own address: the proxy relays from the sandbox's
    namespace, so the host's refusal holds for it as for the guest."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((HOST_SIDE, 80))
    srv.listen(8)
    srv.settimeout(0.2)
    try:
        sbx = make_sandbox(network={"mode": "custom", "allowedHosts": ["host.test"]})
        assert resolve(sbx, "host.test") == [HOST_SIDE]
        assert web(sbx, "http://host.test/")[0] != 0
        with pytest.raises(socket.timeout):
            srv.accept()
    finally:
        srv.close()


# --- forged sources -------------------------------------------------------------------------------

# Watches every interface of the namespace it runs in (but lo) for the frames a forging guest
# could get out: any carrying the marker (a DNS answer repeats the name asked, an ICMP error quotes
# the packet) or going to the forged source (a TCP reset). It prints "ready" once listening, "end"
# at the marker of the guest's last, genuine packet, and "seen <if> <hex>" for each find.
SNIFF = r"""
import socket, sys
marker, end, to = sys.argv[1].encode(), sys.argv[2].encode(), socket.inet_aton(sys.argv[3])
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
print("ready", flush=True)
while True:
    frame, addr = s.recvfrom(65535)
    if addr[0] == "lo":
        continue
    if end in frame:
        print("end", addr[0], flush=True)
    elif marker in frame or (frame[12:14] == b"\x08\x00" and frame[30:34] == to):
        print("seen", addr[0], frame[:80].hex(), flush=True)
"""

# Run as root in the guest: frames written straight onto eth0 with a source not the guest's own.
# argv: marker, forged IPv4 sources (comma-separated), a refused IPv4 destination.
FORGE = r"""
import socket, struct, sys
marker, srcs, dst = sys.argv[1].encode(), sys.argv[2].split(","), sys.argv[3]
GW_MAC, GW = bytes.fromhex("02cb00000001"), "169.254.0.1"
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind(("eth0", 0))
me = s.getsockname()[4]

def csum(b):
    b += b"\0" * (len(b) & 1)
    t = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while t >> 16:
        t = (t & 0xffff) + (t >> 16)
    return ~t & 0xffff

def ip4(src, to, proto, body):
    h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(body), 7, 0, 64, proto, 0,
                    socket.inet_aton(src), socket.inet_aton(to))
    h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
    s.send(GW_MAC + me + b"\x08\x00" + h + body)

def l4sum(src, to, proto, seg):
    pseudo = socket.inet_aton(src) + socket.inet_aton(to) + struct.pack("!BBH", 0, proto, len(seg))
    return struct.pack("!H", csum(pseudo + seg))

def udp(src, to, port, data):
    seg = struct.pack("!HHHH", 40000, port, 8 + len(data), 0) + data
    ip4(src, to, 17, seg[:6] + l4sum(src, to, 17, seg) + seg[8:])

def syn(src, to, port, data):
    seg = struct.pack("!HHIIBBHHH", 40001, port, 1, 0, 5 << 4, 0x02, 65535, 0, 0) + data
    ip4(src, to, 6, seg[:16] + l4sum(src, to, 6, seg) + seg[18:])

def dns(name):
    q = b"".join(bytes([len(l)]) + l for l in name.split(b".")) + b"\0"
    return struct.pack("!HHHHHH", 0x4242, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)

for _ in range(3):
    for src in srcs:
        udp(src, GW, 53, dns(marker + b".exfil.test"))  # the resolver's answer names it
        udp(src, dst, 9, marker)                        # an ICMP error would quote it
        udp(src, GW, 9, marker)                         # to the gateway: refused too
        syn(src, dst, PORT, marker)                     # a reset, or the SYN itself
        ip4(src, dst, 1, struct.pack("!BBHHH", 8, 0, 0, 1, 1) + marker)  # ping
    v6 = socket.inet_pton(socket.AF_INET6, "2001:2::2") + socket.inet_pton(socket.AF_INET6, "2001:2::3")
    body = struct.pack("!HHHH", 40000, 9, 8 + len(marker), 0) + marker
    s.send(GW_MAC + me + b"\x86\xdd" + struct.pack("!IHBB", 6 << 28, len(body), 17, 64) + v6 + body)
print("sent")
"""


def _described(line):
    """A watcher's "seen IF HEX" as "IF: SRC > DST proto P"."""
    _, ifname, frame = line.split()
    b = bytes.fromhex(frame)
    if b[12:14] == b"\x08\x00":
        return f"{ifname}: {socket.inet_ntoa(b[26:30])} > {socket.inet_ntoa(b[30:34])} proto {b[23]}"
    if b[12:14] == b"\x86\xdd":
        return f"{ifname}: IPv6 {b[22:38].hex()} > {b[38:54].hex()}"
    return f"{ifname}: ether type {b[12:14].hex()}"


def _lines_into(f, q):
    for line in f:
        q.put(line)
    q.put("")


def forged_leaks(sbx, modes):
    """Under each policy of modes, a root guest writes frames with sources not its own (another
    internet address, the host's): a DNS question to the resolver, UDP to a refused address and to
    the gateway, a TCP SYN, a ping, and IPv6. Returns what of them, or of any answer to them, left
    the sandbox's namespace, as seen on every interface of the host and of the stand-in internet.
    The guest's last packet, genuine and allowed, shows that the watch sees what does get out."""
    marker, end = f"forged{secrets.token_hex(6)}", f"genuine{secrets.token_hex(6)}"
    watchers = [subprocess.Popen(pre + ["python3", "-c", SNIFF, marker, end, B],
                                 stdout=subprocess.PIPE, text=True)
                for pre in ([], ["ip", "netns", "exec", NS])]
    try:
        queues = []
        for w in watchers:
            assert w.stdout.readline().strip() == "ready"
            queues.append(queue.Queue())
            threading.Thread(target=_lines_into, args=(w.stdout, queues[-1]), daemon=True).start()
        sbx.files.write("/tmp/forge.py", FORGE.replace("PORT", str(PORT)))
        for mode in modes:
            sbx.set_network(mode)
            r = sbx.exec(["python3", "/tmp/forge.py", marker, f"{B},{HOST_SIDE}", C],
                         user="root", timeout="60s")
            assert r.exit_code == 0 and "sent" in r.stdout, (r.stdout, r.stderr)
        # Genuine and allowed, sent after the forged frames on the same link: once the watchers
        # saw it, they would have seen those.
        sbx.set_network("allow-all")
        r = sbx.exec(["python3", "-c", "import socket, sys; socket.socket(socket.AF_INET, "
                      "socket.SOCK_DGRAM).sendto(sys.argv[1].encode(), (sys.argv[2], 9))",
                      end, C], timeout="60s")
        assert r.exit_code == 0, r.stderr
        seen = []
        for lines in queues:
            deadline = time.monotonic() + 30 * SLOW
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    pytest.fail("the genuine packet never got out")
                assert line, "a watcher ended early"
                if line.startswith("end"):
                    break
                seen.append(_described(line))
        return seen
    finally:
        for w in watchers:
            w.kill()
            w.wait()


# Frames the guest writes in one run of FORGE: 3 rounds of 5 per forged source, 2 sources, and one
# IPv6.
FORGED_FRAMES = 3 * (5 * 2 + 1)


def test_forged_sources_go_nowhere(netd, internet, make_sandbox):
    sbx = make_sandbox(template="python", network="deny-all")
    before = counters(netd, sbx)["refused_packets"]
    seen = forged_leaks(sbx, ["deny-all", "allow-all"])
    assert not seen, "\n".join(seen)
    # dropped at the guest's link, and counted as refused there
    assert counters(netd, sbx)["refused_packets"] - before >= 2 * FORGED_FRAMES


def test_a_sandbox_taken_over_is_guarded(netd, internet, make_sandbox):
    """A sandbox whose namespace lacks the guard (made by a cpuosd before it) gets it from the
    daemon that takes it over."""
    before = set(os.listdir("/run/netns"))
    sbx = make_sandbox(template="python", network="deny-all")
    (ns,) = set(os.listdir("/run/netns")) - before
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], check=True, text=True,
                   input="delete table netdev cpuos_guard\ndelete chain inet cpuos leave\n")
    netd.restart()
    assert not forged_leaks(sbx, ["deny-all"])
    rules = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "ruleset"], check=True,
                           capture_output=True, text=True).stdout
    assert "table netdev cpuos_guard" in rules and "chain leave" in rules, rules
