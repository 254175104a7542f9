"""The SDK polish against a real cpuosd: binary stdin, live exec callbacks, lazy listing across
pages and keep-alive connection reuse (over TCP and the Unix socket)."""

import hashlib
import time
import uuid

import pytest

import cpuos
from cpuos import _client

T = "60s"  # every command's timeout: a daemon that never answers fails the test, not hangs it

# Every byte value, NUL and 0xff among them, and invalid UTF-8 sequences.
BLOB = bytes(range(256)) * 257 + b"\x00\xff\xfe\x80\xc3(\n\x00"


def test_binary_stdin_round_trip(sandbox):
    r = sandbox.exec("sha256sum", stdin=BLOB, timeout=T)
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split()[0] == hashlib.sha256(BLOB).hexdigest()
    r = sandbox.exec(["wc", "-c"], stdin=bytearray(b"\x00\xff\x00"), timeout=T)
    assert r.stdout.strip() == "3"
    r = sandbox.exec("od -An -tx1", stdin=memoryview(b"\xff\x00A"), timeout=T)
    assert r.stdout.split() == ["ff", "00", "41"]
    # Text is still text, sent as UTF-8.
    assert sandbox.exec("od -An -tx1", stdin="é", timeout=T).stdout.split() == ["c3", "a9"]


def test_on_stdout_gets_chunks_while_the_command_runs(sandbox):
    seen = []
    start = time.monotonic()
    r = sandbox.exec("for i in 1 2 3 4 5; do echo tick$i; sleep 0.4; done; echo bye >&2", timeout=T,
                     on_stdout=lambda t: seen.append(("out", time.monotonic(), t)),
                     on_stderr=lambda t: seen.append(("err", time.monotonic(), t)))
    end = time.monotonic()
    out = [t for kind, _, t in seen if kind == "out"]
    err = [t for kind, _, t in seen if kind == "err"]
    assert (r.exit_code, r.stdout, r.stderr) == (0, "".join(f"tick{i}\n" for i in range(1, 6)), "bye\n")
    assert "".join(out) == r.stdout and "".join(err) == r.stderr
    assert len(out) >= 3, out  # several chunks, not the whole output once
    first = seen[0][1]
    # The first tick came about 1.6 s (four sleeps) before the command ended: live, not at the end.
    assert end - first >= 1.0, (first - start, end - start)


def test_on_stdout_exit_status_and_timeout(sandbox):
    got = []
    r = sandbox.exec(["sh", "-c", "echo partial; exit 7"], on_stdout=got.append, timeout=T)
    assert (r.exit_code, r.stdout, "".join(got)) == (7, "partial\n", "partial\n")
    got.clear()
    with pytest.raises(cpuos.TimeoutError) as e:
        sandbox.exec("echo started; sleep 30", timeout="2s", on_stdout=got.append)
    assert e.value.result.timed_out and e.value.result.stdout == "started\n"
    assert "".join(got) == "started\n"


def test_list_iterates_lazily_across_pages(make_sandbox):
    tag = uuid.uuid4().hex
    made = [make_sandbox(metadata={"suite": tag, "n": str(i)}) for i in range(3)]
    it = cpuos.Sandbox.list(metadata={"suite": tag}, page_size=1)
    assert it.pages_fetched == 1
    first = next(it)
    assert it.pages_fetched == 1  # the first page is used up; the next one is not asked for yet
    second = next(it)
    assert it.pages_fetched == 2
    ids = [first.id, second.id] + [s.id for s in it]
    assert sorted(ids) == sorted(s.id for s in made) and len(set(ids)) == 3
    assert it.pages_fetched >= 3
    pages = list(cpuos.Sandbox.list(metadata={"suite": tag}, page_size=2).pages())
    assert [len(p) for p in pages if p] == [2, 1]
    assert sorted(s.id for p in pages for s in p) == sorted(s.id for s in made)
    everything = list(cpuos.Sandbox.list(metadata={"suite": tag}))
    assert len(everything) == 3 and all(s.state == "running" for s in everything)


def test_calls_reuse_a_few_connections(sandbox):
    client = sandbox.client
    before = client.pool_stats()
    calls = 0
    for i in range(6):
        sandbox.info()
        assert sandbox.exec("echo $0", stdin="x", timeout=T).exit_code == 0
        sandbox.files.write(f"/work/reuse{i}", b"\x00" * 1000)
        assert sandbox.files.read(f"/work/reuse{i}") == b"\x00" * 1000  # streamed, read to the end
        assert sandbox.files.exists(f"/work/reuse{i}")
        assert sandbox.exec("echo hi", on_stdout=lambda t: None, timeout=T).stdout == "hi\n"
        calls += 6
    proc = sandbox.exec("echo bg", background=True)
    assert proc.wait(timeout=30).stdout == "bg\n"  # wait, then the process stream to its end
    after = client.pool_stats()
    opened, reused = after.opened - before.opened, after.reused - before.reused
    assert opened <= 2, after
    assert reused >= calls + 2 - opened, after
    assert after.idle >= 1


def test_unix_socket_reuses_its_connection(daemon):
    with _client.Client(api_url="unix://" + daemon.socket) as c:  # the administrator: no key
        for _ in range(10):
            assert "sandboxes" in c.request("GET", "/v1/sandboxes", query={"limit": 1})
        stats = c.pool_stats()
    assert (stats.opened, stats.reused) == (1, 9)
