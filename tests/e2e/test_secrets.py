"""Egress secrets against a real cpuosd: a secret registered with the daemon and bound to a host
reaches that host in a request header, over plain HTTP and over HTTPS (the daemon's proxy ends the
guest's TLS under its own CA, which the guest trusts, and checks the server's certificate), and is
never in the guest: its environment and files hold a placeholder, and the memory of the process
that sent it holds the placeholder but not the value. Sent to an unbound host it stays the
placeholder, and the daemon logs it. The "internet" is the stand-in of internet.py, whose /headers
answers with the SHA-256 of each header it got, so no value comes back into the guest."""

import base64
import hashlib
import json
import os
import secrets as pysecrets
import socket
import sqlite3
import subprocess
import time
import zipfile

import pytest

import cpuos
from conftest import started_daemon, sandbox_factory
from internet import DNS_ADDR, DNS_PORT, SPARE, running
from procmem import memory_has, netd_of

VALUE = "sk-test-0123456789abcdef-the-real-one"


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture(scope="module")
def internet():
    yield from running()


@pytest.fixture(scope="module")
def secd(internet):
    """A daemon whose guests' resolver asks the stand-in internet, and whose proxy trusts the
    stand-in's certificate for the servers it sends secrets to."""
    yield from started_daemon("--dns-upstream", f"{DNS_ADDR}:{DNS_PORT}", "--net-default",
                              "allow-all", "--egress-trust", internet.cert, key="sec")


@pytest.fixture
def make_sandbox(secd):
    yield from sandbox_factory(secd)


def set_secret(d, name, value, hosts, key=None, **kw):
    return cpuos.Secret.set(name, value, hosts, api_key=key or d.key_a, api_url=d.url, **kw)


def sh(sbx, cmd, ok=True):
    r = sbx.exec(cmd, timeout="90s")
    if ok:
        assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r


def status(sbx, url, *opts, stdin=None):
    """The HTTP status curl in the guest got ("000": none)."""
    feed = f"printf {stdin} | " if stdin else ""
    r = sh(sbx, f"{feed}curl -sS -m 20 -o /dev/null -w '%{{http_code}}' {' '.join(opts)} {url}",
           ok=False)
    return r.stdout


def headers_seen(sbx, url, header="Authorization: Bearer $API_KEY", *opts):
    """What the server at url got (header name -> SHA-256 of its value), by curl in the guest."""
    r = sh(sbx, f"curl -sS -m 20 {' '.join(opts)} -H \"{header}\" {url}")
    return json.loads(r.stdout)


def test_a_secret_reaches_its_host_and_stays_out_of_the_guest(secd, make_sandbox):
    s = set_secret(secd, "API_KEY", VALUE, ["allowed.test"])
    assert s.placeholder.startswith("cpuos-secret-") and s.hosts == ["allowed.test"]
    sbx = make_sandbox(secrets=["API_KEY"])
    assert sbx.secrets == ["API_KEY"]
    assert sh(sbx, "printf %s \"$API_KEY\"").stdout == s.placeholder
    # HTTPS through the proxy's own TLS: the value arrives, hashed back.
    url = "https://allowed.test/headers"
    assert headers_seen(sbx, url)["authorization"] == sha("Bearer " + VALUE)
    # Plain HTTP to the same host: not without allow_http (nothing proves the server is the host).
    got = headers_seen(sbx, "http://allowed.test/headers")
    assert got["authorization"] == sha("Bearer " + s.placeholder)
    assert "secret API_KEY not put in a request to allowed.test: plain HTTP" in \
        secd.log_tail(200000)
    # An unbound host gets the placeholder, and the daemon says so.
    got = headers_seen(sbx, "https://other.test/headers", "Authorization: Bearer $API_KEY", "-k")
    assert got["authorization"] == sha("Bearer " + s.placeholder)
    got = headers_seen(sbx, "http://other.test/headers")
    assert got["authorization"] == sha("Bearer " + s.placeholder)
    assert "the placeholder of secret API_KEY went to other.test" in secd.log_tail(200000)
    # Nowhere in the guest: not in any process's environment, not in a file; the same search
    # finds the placeholder (in its own environment at least).
    where = "/proc/[0-9]*/environ /etc /home /root /tmp /work /var"
    r = sh(sbx, f"grep -rlsF -- '{VALUE}' {where}", ok=False)
    assert r.exit_code in (1, 2) and not r.stdout, r.stdout
    r = sh(sbx, f"grep -rlsF -- '{s.placeholder}' {where}", ok=False)
    assert "/environ" in r.stdout, r
    # The guest's TLS was ours: its certificate names the host and is signed by the daemon's CA.
    r = sh(sbx, "curl -sS -o /dev/null -w '%{ssl_verify_result}' https://allowed.test/headers")
    assert r.stdout == "0"


SEND = r"""
import json, os, time, urllib.request
req = urllib.request.Request("https://allowed.test/headers",
                             headers={"X-Key": os.environ["MEM_KEY"]})
seen = json.load(urllib.request.urlopen(req, timeout=60))
with open("/tmp/seen.tmp", "w") as f:
    json.dump({"pid": os.getpid(), "seen": seen.get("x-key")}, f)
os.rename("/tmp/seen.tmp", "/tmp/seen")
time.sleep(600)
"""

# Reads another process's whole memory (as root) for two needles; run with the value in its own
# environment, never in the sender's.
SCAN = r"""
import json, os, re, sys
pid = int(sys.argv[1])
found = {}
with open(f"/proc/{pid}/maps") as maps, open(f"/proc/{pid}/mem", "rb", 0) as mem:
    for line in maps:
        m = re.match(r"([0-9a-f]+)-([0-9a-f]+) r", line)
        if not m:
            continue
        a, b = int(m.group(1), 16), int(m.group(2), 16)
        try:
            mem.seek(a)
            data = mem.read(b - a)
        except (OSError, ValueError, OverflowError):
            continue
        for what in ("WANT", "MEM_KEY"):
            if os.environ[what].encode() in data:
                found[what] = True
print(json.dumps(found))
"""


def test_plain_http_only_for_a_secret_that_allows_it(secd, make_sandbox):
    s = set_secret(secd, "HTTP_KEY", "http-value", ["allowed.test"], allow_http=True)
    assert s.allow_http
    sbx = make_sandbox(secrets=["HTTP_KEY"])
    assert headers_seen(sbx, "http://allowed.test/headers", "X-Api-Key: $HTTP_KEY")["x-api-key"] == \
        sha("http-value")
    # A Host with more than a port after the name is no request the proxy reads: under allow-all
    # it passes as it is, the placeholder unswapped (a server may echo its Host).
    got = headers_seen(sbx, "http://allowed.test/headers", "Host: allowed.test:$HTTP_KEY")
    assert got["host"] == sha("allowed.test:" + s.placeholder)
    # Nor into a header servers echo back (Origin here): the placeholder stays.
    got = headers_seen(sbx, "http://allowed.test/headers", "Origin: $HTTP_KEY")
    assert got["origin"] == sha(s.placeholder)
    # Under allow-all with secrets, what is not HTTP to a bound host passes as it is: a chunked
    # upload reaches the unbound server (which answers 501: it has no POST).
    assert status(sbx, "http://other.test/headers", "-H 'Transfer-Encoding: chunked'",
                  "--data-binary @-", stdin="x") == "501"


def test_the_value_is_not_in_the_memory_of_the_process_that_sent_it(secd, make_sandbox):
    set_secret(secd, "MEM_KEY", VALUE + "-mem", ["allowed.test"])
    sbx = make_sandbox(template="python", secrets=["MEM_KEY"])
    sbx.files.write("/tmp/send.py", SEND)
    sbx.files.write("/tmp/scan.py", SCAN)
    sender = sbx.exec("python3 /tmp/send.py", background=True)
    try:
        sh(sbx, "for i in $(seq 600); do [ -e /tmp/seen ] && exit 0; sleep 0.2; done; exit 1")
        sent = json.loads(sbx.files.read("/tmp/seen"))
        assert sent["seen"] == sha(VALUE + "-mem")  # it went, as the value
        r = sbx.exec(f"python3 /tmp/scan.py {sent['pid']}", env={"WANT": VALUE + "-mem"},
                     user="root", timeout="180s")
        assert r.exit_code == 0, r.stderr
        # The scan finds what is there (the placeholder), and the value is not.
        assert json.loads(r.stdout) == {"MEM_KEY": True}, r.stdout
    finally:
        sender.kill()


def db_files(d):
    """The bytes of daemon d's database and its WAL."""
    db = os.path.join(d.state_dir, "cpuos.db")
    out = b""
    for p in (db, db + "-wal"):
        if os.path.exists(p):
            with open(p, "rb") as f:
                out += f.read()
    return out


def test_cpuosd_keeps_no_value_it_can_read(secd, make_sandbox):
    """A value given to the API goes to cpuos-netd to be sealed at once: once it is set, set
    again and used, neither cpuosd's memory nor its database holds either value, only sealed
    texts; cpuos-netd's memory holds the value in use. Their random tails are looked for:
    malloc writes its own pointers over the head of a block it takes back."""
    first, second = (f"sk-unsealed-{pysecrets.token_hex(16)}" for _ in range(2))
    tails = {first[-24:].encode(), second[-24:].encode()}
    s = set_secret(secd, "SEALED_KEY", first, ["allowed.test"])
    ph = s.placeholder.encode()  # what is there: the scan reads cpuosd's memory
    assert memory_has(secd.proc.pid, tails | {ph}) == {ph}  # the body, its JSON: wiped
    set_secret(secd, "SEALED_KEY", second, ["allowed.test"])  # over the first
    assert memory_has(secd.proc.pid, tails | {ph}) == {ph}
    sbx = make_sandbox(secrets=["SEALED_KEY"])
    got = headers_seen(sbx, "https://allowed.test/headers", "Authorization: Bearer $SEALED_KEY")
    assert got["authorization"] == sha("Bearer " + second)
    assert memory_has(secd.proc.pid, tails | {ph}) == {ph}
    assert second[-24:].encode() in memory_has(netd_of(secd.proc.pid), tails)
    stored = db_files(secd)
    assert b"sealed1:" in stored and not any(t in stored for t in tails)


def edit_db(d, *statements):
    """Runs statements on daemon d's database while it is stopped, as an older daemon (or one
    who can write the file) would have left it; the files stay the daemon's."""
    db = os.path.join(d.state_dir, "cpuos.db")
    st = os.stat(db)
    con = sqlite3.connect(db)
    with con:
        for sql, args in statements:
            con.execute(sql, args)
    con.close()
    for p in (db, db + "-wal", db + "-shm"):
        if os.path.exists(p):
            os.chown(p, st.st_uid, st.st_gid)


def test_values_from_before_are_sealed_and_bindings_hold(secd, make_sandbox):
    """A value an older daemon stored plaintext is sealed when the daemon starts, and the old
    bytes scrubbed from the database; a sealed value whose row was given other hosts (what a
    cpuosd taken over could tell cpuos-netd) does not open, so it goes nowhere."""
    set_secret(secd, "BOUND_KEY", "bound-value", ["allowed.test"])
    account = sqlite3.connect(f"file:{secd.state_dir}/cpuos.db?mode=ro", uri=True).execute(
        "SELECT account FROM secrets WHERE name = 'BOUND_KEY'").fetchone()[0]
    old = f"sk-plaintext-{pysecrets.token_hex(16)}"
    secd.stop()
    try:
        edit_db(secd,
                ("INSERT INTO secrets (account, name, value, hosts, placeholder, created_at, "
                 "updated_at, allow_http, sealed) VALUES (?, 'OLD_KEY', ?, '[\"allowed.test\"]', "
                 "?, 1, 1, 0, 0)", (account, old, "cpuos-secret-" + pysecrets.token_hex(16))),
                ("UPDATE secrets SET hosts = '[\"other.test\"]' WHERE name = 'BOUND_KEY'", ()))
        assert old.encode() in db_files(secd)
    finally:
        secd.start()
    assert "secrets an earlier daemon stored plaintext, sealed now: 1" in secd.log_tail(400)
    assert old.encode() not in db_files(secd)
    sbx = make_sandbox(secrets=["OLD_KEY", "BOUND_KEY"])
    url = "https://allowed.test/headers"
    assert headers_seen(sbx, url, "X-Old-Key: $OLD_KEY")["x-old-key"] == sha(old)
    ph = sh(sbx, "printf %s \"$BOUND_KEY\"").stdout
    got = headers_seen(sbx, "https://other.test/headers", "X-Bound-Key: $BOUND_KEY", "-k")
    assert got["x-bound-key"] == sha(ph)
    assert "secret BOUND_KEY of account" in secd.log_tail(400)
    assert "does not open with this host's key" in secd.log_tail(400)
    assert memory_has(secd.proc.pid, {old[-24:].encode(), ph.encode()}) == {ph.encode()}


def test_node_trusts_the_daemons_ca(secd, make_sandbox):
    """Node has roots of its own; Debian's reads the system bundle, where the CA went at boot."""
    set_secret(secd, "NODE_KEY", "node-value", ["allowed.test"])
    sbx = make_sandbox(template="node", secrets=["NODE_KEY"])
    sbx.files.write("/tmp/get.js", "require('https').get('https://allowed.test/headers', "
                    "{headers: {'x-n-key': process.env.NODE_KEY}}, r => { let b = ''; "
                    "r.on('data', d => b += d); r.on('end', () => console.log(b)); })"
                    ".on('error', e => { console.error(e.message); process.exit(1); });")
    r = sh(sbx, "node /tmp/get.js")
    assert json.loads(r.stdout)["x-n-key"] == sha("node-value")


def test_changes_reach_running_sandboxes(secd, make_sandbox):
    set_secret(secd, "ROT", "first-value", ["allowed.test"])
    sbx = make_sandbox(secrets=["ROT"])
    url = "https://allowed.test/headers"
    assert headers_seen(sbx, url, "X-Rot-Key: $ROT")["x-rot-key"] == sha("first-value")
    s = set_secret(secd, "ROT", "second-value", ["allowed.test"])
    assert sh(sbx, "printf %s \"$ROT\"").stdout == s.placeholder  # the same placeholder
    assert headers_seen(sbx, url, "X-Rot-Key: $ROT")["x-rot-key"] == sha("second-value")
    # Bound elsewhere now: allowed.test no longer gets it, and its TLS is its own again (-k: the
    # stand-in's certificate is self-signed).
    set_secret(secd, "ROT", "second-value", ["other.test"])
    assert headers_seen(sbx, url, "X-Rot-Key: $ROT", "-k")["x-rot-key"] == sha(s.placeholder)
    assert headers_seen(sbx, "https://other.test/headers", "X-Rot-Key: $ROT")["x-rot-key"] == \
        sha("second-value")
    cpuos.Secret.get("ROT", api_key=secd.key_a, api_url=secd.url).delete()
    assert headers_seen(sbx, "https://other.test/headers", "X-Rot-Key: $ROT", "-k")["x-rot-key"] == \
        sha(s.placeholder)


def test_pause_resume_and_forks_keep_their_secrets(secd, make_sandbox):
    set_secret(secd, "KEEP", "kept-value", ["*.wild.test"])
    sbx = make_sandbox(secrets=["KEEP"])
    url = "https://a.wild.test/headers"
    assert headers_seen(sbx, url, "X-K-Key: $KEEP")["x-k-key"] == sha("kept-value")
    sbx.pause()
    sbx.resume()
    assert headers_seen(sbx, url, "X-K-Key: $KEEP")["x-k-key"] == sha("kept-value")
    child, = sbx.fork()
    try:
        assert child.secrets == ["KEEP"]
        assert headers_seen(child, "https://b.wild.test/headers", "X-K-Key: $KEEP")["x-k-key"] == \
            sha("kept-value")
    finally:
        child.kill()


def test_what_the_proxy_refuses(secd, make_sandbox):
    set_secret(secd, "GUARD", "guarded-value", ["allowed.test", "wild.test"])
    sbx = make_sandbox(secrets=["GUARD"], network={
        "mode": "custom", "allowed_hosts": ["allowed.test", "other.test", "wild.test"]})
    guard = "-H \"X-Api-Key: $GUARD\""
    # Another Host inside TLS made for allowed.test: a CDN would serve it; refused.
    assert status(sbx, "https://allowed.test/headers", "-H 'Host: other.test'", guard) == "421"
    # A server whose certificate does not name the host gets nothing: 502 from the proxy.
    assert status(sbx, "https://wild.test/headers", guard) == "502"
    assert "TLS to wild.test failed" in secd.log_tail(200000)
    # A Host that carries more than a port: refused inside TLS too.
    assert status(sbx, "https://allowed.test/headers", "-H \"Host: allowed.test:$GUARD\"") == "400"
    # A chunked body cannot be framed by the proxy: refused, not passed on.
    assert status(sbx, "https://allowed.test/headers", "-H 'Transfer-Encoding: chunked'", guard,
                  "--data-binary @-", stdin="x") == "411"
    # Under a custom policy the secret goes too, and still only to its host.
    assert headers_seen(sbx, "https://allowed.test/headers", "X-Api-Key: $GUARD")["x-api-key"] == \
        sha("guarded-value")


def test_the_secrets_api(secd, make_sandbox):
    d, key = secd, secd.key_a
    def put(name, body, k=key):
        return d.http("PUT", f"/v1/secrets/{name}", body=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"}, key=k)
    ok = {"value": "v", "hosts": ["allowed.test"]}
    r = put("API_ONE", ok)
    assert r.status == 201 and "value" not in r.json() and r.json()["placeholder"]
    assert put("API_ONE", ok).status == 200
    for name, body in (("1BAD", ok), ("A-B", ok), ("X", {"value": "v", "hosts": ["*"]}),
                       ("X", {"value": "v", "hosts": ["*."]}), ("X", {"value": "v", "hosts": ["*.com"]}),
                       ("X", {"value": "v", "hosts": ["a.test"], "allow_http": "yes"}),
                       ("X", {"value": "v", "hosts": []}), ("X", {"value": "a\nb", "hosts": ["a.test"]}),
                       ("X", {"value": "", "hosts": ["a.test"]}), ("X", {"hosts": ["a.test"]}),
                       ("X", {"value": "v", "hosts": "a.test"})):
        r = put(name, body)
        assert r.status == 422 and r.json()["error"], (name, body, r.status)
    listed = d.http("GET", "/v1/secrets", key=key).json()["secrets"]
    assert "API_ONE" in [s["name"] for s in listed] and all("value" not in s for s in listed)
    assert d.http("GET", "/v1/secrets/NOPE", key=key).status == 404
    # Another account sees none of it, and cannot give it to a sandbox.
    other = d.create_key("sec-other")
    assert d.http("GET", "/v1/secrets/API_ONE", key=other).status == 404
    with pytest.raises(cpuos.BadRequestError, match="no secret 'API_ONE'"):
        make_sandbox(secrets=["API_ONE"], key=other)
    with pytest.raises(cpuos.BadRequestError, match="API_ONE"):
        make_sandbox(secrets=["API_ONE"], env={"API_ONE": "mine"})
    with pytest.raises(cpuos.BadRequestError, match="no secret"):
        make_sandbox(secrets=["NOPE"])
    assert d.http("DELETE", "/v1/secrets/API_ONE", key=key).status == 204
    assert d.http("DELETE", "/v1/secrets/API_ONE", key=key).status == 404


def test_the_cli(secd):
    from test_cpuos_cli import cpuos as cli
    key = secd.key_a
    r = cli(secd, "secret", "set", "CLI_KEY", "--host", "allowed.test", stdin=b"cli-value\n",
            key=key)
    assert r.returncode == 0 and r.stdout.decode().startswith("cpuos-secret-"), r.stderr
    placeholder = r.stdout.decode().strip()
    r = cli(secd, "secret", "ls", key=key)
    assert r.returncode == 0 and "CLI_KEY" in r.stdout.decode() and b"cli-value" not in r.stdout
    r = cli(secd, "secret", "set", "CLI_KEY", "--host", "*", stdin=b"v", key=key)
    assert r.returncode == 1 and len(r.stderr.splitlines()) == 1, r
    r = cli(secd, "secret", "set", "CLI_KEY", stdin=b"v", key=key)
    assert r.returncode == 2 and b"--host" in r.stderr, r
    r = cli(secd, "create", "-T", "base", "--secret", "CLI_KEY", key=key)
    assert r.returncode == 0, r.stderr
    made = cpuos.Sandbox.connect(r.stdout.decode().strip(), api_key=key, api_url=secd.url)
    try:
        assert made.secrets == ["CLI_KEY"]
        got = json.loads(sh(made, "curl -sS -H \"X-Api-Key: $CLI_KEY\" https://allowed.test/headers").stdout)
        assert got["x-api-key"] == sha("cli-value") and placeholder != "cli-value"
    finally:
        made.kill()
    assert cli(secd, "secret", "rm", "CLI_KEY", key=key).returncode == 0
    r = cli(secd, "secret", "rm", "CLI_KEY", key=key)
    assert r.returncode == 1 and b"CLI_KEY" in r.stderr, r


TOKEN = "ghp_forge-token-0123456789abcdef"


def wheel(where, name="cpuos_probe", version="0.1"):
    """A pure-Python wheel whose module holds VALUE = 42: what the stand-in index serves."""
    files = {f"{name}/__init__.py": b"VALUE = 42\n",
             f"{name}-{version}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: {version}\n".encode(),
             f"{name}-{version}.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: cpuos-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},"
        f"{len(b)}\n" for p, b in files.items())
    files[f"{name}-{version}.dist-info/RECORD"] = (record + f"{name}-{version}.dist-info/RECORD,,\n").encode()
    with zipfile.ZipFile(os.path.join(where, f"{name}-{version}-py3-none-any.whl"), "w") as z:
        for p, b in files.items():
            z.writestr(p, b)


@pytest.fixture(scope="module")
def forge(internet, tmp_path_factory):
    """The stand-in forge (forge.py) on git.test and pypi.test: a bare repository with one
    commit, a wheel, and a log of each request and whether its credentials held."""
    d = tmp_path_factory.mktemp("forge")
    git = lambda *a: subprocess.run(["git", *a], check=True, capture_output=True, cwd=d)
    git("init", "-q", "--bare", "-b", "main", "repo.git")
    git("init", "-q", "-b", "main", "work")
    (d / "work" / "README").write_text("from the forge\n")
    git("-C", "work", "add", "README")
    git("-C", "work", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first")
    git("-C", "work", "push", "-q", str(d / "repo.git"), "main")
    git("--git-dir", "repo.git", "config", "http.receivepack", "true")
    (d / "wheels").mkdir()
    wheel(str(d / "wheels"))
    log = d / "requests.log"
    log.write_text("")
    internet.spawn("python3", os.path.join(os.path.dirname(__file__), "forge.py"), SPARE, "443",
                   internet.cert, internet.key, TOKEN, str(d), str(d / "wheels"), str(log))
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection((SPARE, 443), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "the stand-in forge did not start"
            time.sleep(0.1)
    yield d


def test_git_and_pip_get_a_brokered_token_in_basic_credentials(secd, forge, make_sandbox):
    """git over HTTPS and pip from a private index send a token as the password of HTTP Basic
    credentials (base64 of user:token): the placeholder inside is swapped too, toward the bound
    host only, and a clone, a push and an install work with a token the guest never holds."""
    set_secret(secd, "GIT_TOKEN", TOKEN, ["git.test"])
    set_secret(secd, "PIP_TOKEN", TOKEN, ["pypi.test"])
    sbx = make_sandbox(template="python", secrets=["GIT_TOKEN", "PIP_TOKEN"])
    log = forge / "requests.log"
    sh(sbx, 'git clone -q "https://x-access-token:$GIT_TOKEN@git.test/repo.git" /tmp/repo')
    assert sh(sbx, "cat /tmp/repo/README").stdout == "from the forge\n"
    sh(sbx, "cd /tmp/repo && echo pushed >NEW && git add NEW && "
            "git -c user.name=g -c user.email=g@g commit -qm 'from the guest' && git push -q")
    r = subprocess.run(["git", "--git-dir", str(forge / "repo.git"), "log", "--format=%s", "main"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.split("\n")[0] == "from the guest", r.stdout
    # GitHub's other spelling: the token as the user, x-oauth-basic as the password.
    sh(sbx, 'git clone -q "https://$GIT_TOKEN:x-oauth-basic@git.test/repo.git" /tmp/repo2')
    assert sh(sbx, "cat /tmp/repo2/NEW").stdout == "pushed\n"
    # pip from the private index, the token in the index URL.
    sh(sbx, "python3 -m pip install -q --disable-pip-version-check --no-deps --target /tmp/p "
            "--index-url \"https://__token__:$PIP_TOKEN@pypi.test/simple/\" cpuos-probe")
    assert sh(sbx, "PYTHONPATH=/tmp/p python3 -c 'import cpuos_probe; print(cpuos_probe.VALUE)'"
              ).stdout == "42\n"
    seen = log.read_text().splitlines()
    assert any(l.startswith("POST /repo.git/git-receive-pack ok") for l in seen), seen
    assert any(l.startswith("GET /files/cpuos_probe") and l.endswith(" ok") for l in seen), seen
    # The git token is bound to git.test only: toward pypi.test its placeholder stays, and fails.
    r = sh(sbx, "python3 -m pip install -q --disable-pip-version-check --no-input --no-deps --target /tmp/q "
                "--index-url \"https://__token__:$GIT_TOKEN@pypi.test/simple/\" cpuos-probe",
           ok=False)
    assert r.exit_code != 0
    assert "the placeholder of secret GIT_TOKEN went to pypi.test" in secd.log_tail(200000)
    # Nowhere in the guest: the clone's config holds the placeholder only.
    assert TOKEN not in sh(sbx, "cat /tmp/repo/.git/config").stdout
    r = sh(sbx, f"grep -rlsF -- '{TOKEN}' /proc/[0-9]*/environ /etc /root /tmp", ok=False)
    assert r.exit_code in (1, 2) and not r.stdout, r.stdout


def test_request_transformations_set_headers_toward_their_host_only(secd, make_sandbox):
    """Rules (the AI SDK's request transformations) whose headers the proxy sets on requests to
    their host, over HTTPS it ends and checks: a literal value and a secret by name arrive, the
    guest's own header of that name is replaced, other hosts and plain HTTP get nothing, the
    value is never in the guest, and the rules last through pause, resume and fork."""
    s = set_secret(secd, "RULE_KEY", "rule-secret-value", ["allowed.test"])
    sbx = make_sandbox()
    url = "https://allowed.test/headers"
    shown = sbx.set_request_transformations([
        {"match": {"host": "allowed.test", "path": {"startsWith": "/headers"}, "method": ["GET"]},
         "transform": {"headers": {"X-Model-Key": "model-key-literal",
                                   "X-Api-Key": "{{secret:RULE_KEY}}"}}}])
    assert shown[0]["transform"]["headers"] == {"x-model-key": "***", "x-api-key": "{{secret:RULE_KEY}}"}
    assert sbx.get_request_transformations() == shown

    def seen(target=url, *opts):
        return json.loads(sh(sbx, f"curl -sS -m 20 {' '.join(opts)} {target}").stdout)
    got = seen(url, "-H 'X-Model-Key: mine'")
    assert got["x-model-key"] == sha("model-key-literal") and got["x-api-key"] == sha("rule-secret-value")
    assert "header rule set in a request to allowed.test" in secd.log_tail(200000)
    # Another host, and plain HTTP to this one: nothing set.
    got = seen("https://other.test/headers", "-k")
    assert "x-model-key" not in got and "x-api-key" not in got
    got = seen("http://allowed.test/headers")
    assert "x-model-key" not in got and "x-api-key" not in got
    # Added by match: the same match gains a header.
    sbx.add_request_transformations([{"match": {"host": "allowed.test", "path": {"startsWith": "/headers"},
                                                "method": ["GET"]},
                                      "transform": {"headers": {"X-Extra": "extra"}}}])
    rules = sbx.get_request_transformations()
    assert len(rules) == 1 and set(rules[0]["transform"]["headers"]) == {"x-model-key", "x-api-key", "x-extra"}
    assert seen()["x-extra"] == sha("extra")
    # Bad rules are refused whole, with the reason.
    for bad, why in (({"match": {"host": "allowed.test"}, "transform": {"headers": {"Host": "x"}}}, "frames"),
                     ({"match": {"host": "a b"}, "transform": {"headers": {"x": "v"}}}, "host"),
                     ({"match": {"host": "allowed.test"}, "transform": {"headers": {"x": "{{secret:NOPE}}"}}},
                      "no secret 'NOPE'")):
        with pytest.raises(cpuos.BadRequestError, match=why):
            sbx.set_request_transformations([bad])
    assert len(sbx.get_request_transformations()) == 1
    r = secd.http("PUT", f"/v1/sandboxes/{sbx.id}/network/transformations", body=b"{\"x\": 1}",
                  headers={"Content-Type": "application/json"}, key=secd.key_a)
    assert r.status == 400 and r.json()["error"]
    # Never in the guest.
    r = sh(sbx, "grep -rlsF -- model-key-literal /proc/[0-9]*/environ /etc /root /tmp", ok=False)
    assert r.exit_code in (1, 2) and not r.stdout, r.stdout
    # Kept across pause and resume, and by a fork.
    sbx.pause()
    sbx.resume()
    assert seen()["x-model-key"] == sha("model-key-literal")
    child, = sbx.fork()
    try:
        got = json.loads(sh(child, f"curl -sS -m 20 {url}").stdout)
        assert got["x-model-key"] == sha("model-key-literal") and got["x-api-key"] == sha("rule-secret-value")
    finally:
        child.kill()
    # None left: the host's own TLS again (-k: the stand-in's certificate is self-signed).
    assert sbx.set_request_transformations([]) == []
    got = seen(url, "-k")
    assert "x-model-key" not in got and got.get("x-api-key") is None
    assert s.placeholder != "rule-secret-value"


AISDK_SCRIPT = r"""
import { createCpuosNetworkSandboxSession } from "%s";
const s = await createCpuosNetworkSandboxSession({ template: "base", timeout: "5m" });
try {
  await s.setRequestTransformations([{ match: { host: "allowed.test" },
                                       transform: { headers: { "X-Harness-Key": "harness-key-value" } } }]);
  await s.addRequestTransformations([{ match: { host: "*.wild.test" },
                                       transform: { headers: { "X-Harness-Key": "wild-value" } } }]);
  const curl = (u) => s.run({ command: `curl -sS -m 20 ${u}` });
  const out = {};
  for (const [k, u] of [["bound", "https://allowed.test/headers"], ["wild", "https://a.wild.test/headers"],
                        ["other", "-k https://other.test/headers"]])
    out[k] = JSON.parse((await curl(u)).stdout);
  out.guest = (await s.run({ command: "grep -rlsF harness-key-value /proc/[0-9]*/environ /etc /root /tmp; true" })).stdout;
  console.log(JSON.stringify(out));
} finally {
  await s.destroy();
}
"""


def test_a_header_rule_from_the_ai_sdk_provider_reaches_its_host_only(secd, tmp_path):
    from test_typescript import AISDK, NODE22
    built = os.path.join(AISDK, "dist", "index.js")
    if not os.access(NODE22, os.X_OK) or not os.path.exists(built):
        pytest.fail("the AI SDK provider is not built (node 22, dist/): run make", pytrace=False)
    script = tmp_path / "rules.mjs"
    script.write_text(AISDK_SCRIPT % built)
    env = dict(os.environ, CPUOS_API_URL=secd.url, CPUOS_API_KEY=secd.key_a)
    r = subprocess.run([NODE22, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["bound"]["x-harness-key"] == sha("harness-key-value")
    assert out["wild"]["x-harness-key"] == sha("wild-value")
    assert "x-harness-key" not in out["other"]
    assert out["guest"] == ""
