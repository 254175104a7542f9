"""The Python SDK against a real cpuosd: commands, processes, timeouts, files, isolation, restart."""

import datetime
import hashlib
import random
import time
import uuid

import pytest

import cpuos


def _when(rfc3339):
    return datetime.datetime.strptime(rfc3339, "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def _wait_for(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


# Commands

def test_exec_exit_codes_and_streams(sandbox):
    r = sandbox.exec("echo out; echo err >&2")
    assert (r.exit_code, r.stdout, r.stderr, r.timed_out) == (0, "out\n", "err\n", False)
    assert r.signal is None and r.duration_ms is not None and r.duration_ms >= 0
    r = sandbox.exec("echo before; exit 3")
    assert (r.exit_code, r.stdout) == (3, "before\n")
    r = sandbox.exec("kill -9 $$")
    assert (r.exit_code, r.signal) == (None, 9)


def test_exec_argv_env_cwd_user(sandbox):
    r = sandbox.exec(["python3", "-c", "import sys; print(sys.argv[1])", "a b; $HOME"])
    assert r.stdout == "a b; $HOME\n"
    r = sandbox.exec("echo $GREETING; pwd", env={"GREETING": "hi there"}, cwd="/tmp")
    assert r.stdout == "hi there\n/tmp\n"
    assert sandbox.exec("id -u").stdout.strip() == "1000"
    assert sandbox.exec("id -u", user="root").stdout.strip() == "0"


def test_exec_stdin(sandbox):
    r = sandbox.exec("cat", stdin="line 1\nline 2 é\n")
    assert r.stdout == "line 1\nline 2 é\n"
    assert sandbox.exec("wc -l", stdin="a\nb\nc\n").stdout.strip() == "3"
    assert sandbox.exec("cat", stdin=b"bytes\n").stdout == "bytes\n"


def test_exec_invalid_utf8_output(sandbox):
    r = sandbox.exec(["python3", "-c", "import sys; sys.stdout.buffer.write(b'a\\xffb')"])
    assert r.stdout == "a\ufffdb"


def test_exec_output_is_truncated_to_its_tail(sandbox):
    r = sandbox.exec(["python3", "-c", "import sys; sys.stdout.write('x' * (3 << 20) + 'END')"])
    assert r.stdout_truncated and not r.stderr_truncated
    assert r.stdout.endswith("xEND") and len(r.stdout) <= (1 << 20)


# Background processes

def test_background_stream_and_wait(sandbox):
    proc = sandbox.exec("for i in 1 2 3; do echo line$i; sleep 0.2; done; echo done >&2; exit 4",
                        background=True)
    assert isinstance(proc, cpuos.Process) and proc.pid is not None
    out, err = [], []
    for kind, text in proc.stream():
        (out if kind == "stdout" else err).append(text)
    assert ("".join(out), "".join(err), proc.exit_code) == ("line1\nline2\nline3\n", "done\n", 4)
    result = proc.wait(timeout=30)
    assert (result.exit_code, result.stdout, result.stderr) == (4, "line1\nline2\nline3\n", "done\n")
    assert proc.info().state == "exited"


def test_stream_is_live(sandbox):
    proc = sandbox.exec(["python3", "-u", "-c",
                         "import time\nfor i in range(4):\n    print(i)\n    time.sleep(1)"],
                        background=True)
    arrivals = []
    for kind, text in proc.stream():
        arrivals.append((time.monotonic(), text))
    assert "".join(t for _, t in arrivals) == "0\n1\n2\n3\n"
    # The first line came while the process was still sleeping, not all at the end.
    assert arrivals[-1][0] - arrivals[0][0] >= 2, arrivals


def test_background_wait_timeout_kill_and_signal(sandbox):
    proc = sandbox.exec("sleep 300", background=True)
    assert proc.state == "running" and proc.cmd == "sleep 300"
    assert proc.pid in [p.pid for p in sandbox.processes()]
    with pytest.raises(cpuos.TimeoutError):
        proc.wait(timeout=1)
    assert proc.info().state == "running"
    proc.kill()
    result = proc.wait(timeout=30)
    assert (result.exit_code, result.signal) == (None, 9)

    proc = sandbox.exec("trap 'echo got TERM; exit 7' TERM; sleep 300 & wait", background=True)
    time.sleep(1)
    proc.signal("SIGTERM")
    result = proc.wait(timeout=30)
    assert result.exit_code == 7 or result.signal == 15, result


def test_background_stdin(sandbox):
    proc = sandbox.exec("cat; echo end", background=True)
    proc.send_stdin("hello\n")
    proc.send_stdin(b"world\n")
    proc.close_stdin()
    out = "".join(text for kind, text in proc.stream() if kind == "stdout")
    assert out == "hello\nworld\nend\n" and proc.exit_code == 0


def test_background_process_unknown_pid(sandbox):
    with pytest.raises(cpuos.NotFoundError):
        sandbox.process(999999)


# Timeouts at both levels

def test_command_timeout(sandbox):
    start = time.monotonic()
    with pytest.raises(cpuos.TimeoutError) as err:
        sandbox.exec("echo started; sleep 60", timeout="2s")
    assert time.monotonic() - start < 30
    result = err.value.result
    assert result.timed_out and result.exit_code is None and result.signal == 9
    assert result.stdout == "started\n"
    assert sandbox.exec("echo alive").stdout == "alive\n"  # the sandbox lives on


def test_sandbox_timeout(make_sandbox):
    sbx = make_sandbox(template="base", timeout="3s", on_timeout="kill")
    assert sbx.state == "running"
    _wait_for(lambda: sbx.info().state == "stopped", 60, "the sandbox timeout")
    assert sbx.end_reason == "timeout"
    with pytest.raises(cpuos.ConflictError):
        sbx.exec("true")
    with pytest.raises(cpuos.ConflictError):
        sbx.files.read("/etc/hostname")
    with pytest.raises(cpuos.ConflictError):
        sbx.set_timeout("1h")
    sbx.kill()  # killing a stopped sandbox is fine


def test_set_timeout(make_sandbox):
    sbx = make_sandbox(template="base", timeout=60, on_timeout="kill")
    assert abs(_when(sbx.expires_at) - _when(sbx.created_at) - 60) <= 15
    sbx.set_timeout("1h")
    assert abs(_when(sbx.expires_at) - time.time() - 3600) <= 120
    assert abs(_when(sbx.info().expires_at) - time.time() - 3600) <= 120
    sbx.set_timeout(5)
    _wait_for(lambda: sbx.info().state == "stopped", 60, "the shortened timeout")
    assert sbx.end_reason == "timeout"


# Files

def test_files_write_read_stat_and_manage(sandbox):
    e = sandbox.files.write("/work/t/hello.txt", "héllo\n")
    assert (e.path, e.size) == ("/work/t/hello.txt", len("héllo\n".encode()))
    assert sandbox.files.read("/work/t/hello.txt") == "héllo\n".encode()
    assert sandbox.files.read_text("/work/t/hello.txt") == "héllo\n"
    assert sandbox.exec("cat /work/t/hello.txt").stdout == "héllo\n"
    st = sandbox.files.stat("/work/t/hello.txt")
    assert (st.type, st.name, st.size, st.uid) == ("file", "hello.txt", 7, 1000)

    sandbox.files.write("/work/t/run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sandbox.files.stat("/work/t/run.sh").mode == "0755"
    assert sandbox.exec("/work/t/run.sh").stdout == "ran\n"
    sandbox.files.write("/root/secret", b"x", user="root", mode="0600")
    assert sandbox.exec("cat /root/secret").exit_code != 0

    assert sandbox.files.mkdir("/work/t/a/b/c").type == "dir"
    assert sandbox.files.rename("/work/t/hello.txt", "/work/t/a/moved.txt").path == "/work/t/a/moved.txt"
    assert not sandbox.files.exists("/work/t/hello.txt") and sandbox.files.exists("/work/t/a/moved.txt")
    names = {e.path: e.type for e in sandbox.files.list("/work/t", depth=3)}
    assert names["/work/t/a"] == "dir" and names["/work/t/a/b/c"] == "dir"
    assert names["/work/t/a/moved.txt"] == "file"
    with pytest.raises(cpuos.NotFoundError):
        sandbox.files.read("/work/t/nope")
    with pytest.raises(cpuos.BadRequestError):
        sandbox.files.read("/work/t")  # a directory
    sandbox.files.remove("/work/t/run.sh")
    sandbox.files.remove("/work/t", recursive=True)
    assert not sandbox.files.exists("/work/t")


def test_file_upload_from_file_iterator_and_download(sandbox, tmp_path):
    local = tmp_path / "in.bin"
    local.write_bytes(bytes(range(256)) * 1000)
    sandbox.files.upload(str(local), "/work/io/in.bin")
    assert sandbox.files.download("/work/io/in.bin", str(tmp_path / "out.bin")) == 256000
    assert (tmp_path / "out.bin").read_bytes() == local.read_bytes()
    # An iterator of unknown length goes up with chunked transfer encoding.
    chunks = [b"a" * 100000, b"", b"b" * 50000, "c" * 7]
    sandbox.files.write("/work/io/chunks", iter(chunks))
    assert sandbox.files.read("/work/io/chunks") == b"a" * 100000 + b"b" * 50000 + b"c" * 7
    sandbox.files.write("/work/io/empty", b"")
    assert sandbox.files.read("/work/io/empty") == b""


def test_many_files(sandbox):
    for i in range(200):
        sandbox.files.write(f"/work/many/f{i:03d}.txt", f"file {i}\n")
    entries = sandbox.files.list("/work/many")
    assert sorted(e.name for e in entries) == [f"f{i:03d}.txt" for i in range(200)]
    assert all(e.path == f"/work/many/{e.name}" and e.type == "file" for e in entries)
    for i in range(200):
        assert sandbox.files.read(f"/work/many/f{i:03d}.txt") == f"file {i}\n".encode()
    assert sandbox.exec("cat /work/many/*.txt | wc -l").stdout.strip() == "200"


def test_200mb_file_roundtrip(sandbox, tmp_path):
    size, chunk = 200 << 20, 1 << 20
    rng = random.Random(200)
    up = hashlib.sha256()
    local = tmp_path / "big.bin"
    with open(local, "wb") as f:  # made chunk by chunk: never 200 MB in memory
        for _ in range(size // chunk):
            block = rng.randbytes(chunk)
            up.update(block)
            f.write(block)
    entry = sandbox.files.upload(str(local), "/work/big.bin")
    local.unlink()
    assert entry.size == size
    assert sandbox.files.stat("/work/big.bin").size == size
    guest = sandbox.exec("sha256sum /work/big.bin", timeout="10m").stdout.split()[0]
    assert guest == up.hexdigest()
    down, n = hashlib.sha256(), 0
    for block in sandbox.files.read_stream("/work/big.bin"):
        assert len(block) <= 65536
        down.update(block)
        n += len(block)
    assert (n, down.hexdigest()) == (size, up.hexdigest())
    sandbox.files.remove("/work/big.bin")


# Listing, metadata, isolation

def test_list_metadata_state_and_pages(make_sandbox):
    tag = uuid.uuid4().hex
    one = make_sandbox(metadata={"suite": tag, "n": "1"})
    two = make_sandbox(metadata={"suite": tag, "n": "2"})
    assert two.metadata == {"suite": tag, "n": "2"}
    assert sorted(s.id for s in cpuos.Sandbox.list(metadata={"suite": tag})) == sorted([one.id, two.id])
    assert [s.id for s in cpuos.Sandbox.list(metadata={"suite": tag, "n": "1"})] == [one.id]
    paged = [s.id for s in cpuos.Sandbox.list(metadata={"suite": tag}, page_size=1)]
    assert sorted(paged) == sorted([one.id, two.id])  # two pages of one, no repeats
    one.kill()
    assert [s.id for s in cpuos.Sandbox.list(state="running", metadata={"suite": tag})] == [two.id]
    stopped = cpuos.Sandbox.list(state="stopped", metadata={"suite": tag})
    assert [(s.id, s.end_reason) for s in stopped] == [(one.id, "killed")]
    again = cpuos.Sandbox.connect(two.id)
    assert (again.id, again.template, again.state) == (two.id, "base", "running")


def test_two_keys_cannot_see_each_other(daemon, sandbox, make_sandbox):
    bob = make_sandbox(key=daemon.key_b, metadata={"owner": "bob"})
    alice_ids = {s.id for s in cpuos.Sandbox.list(api_key=daemon.key_a)}
    bob_ids = {s.id for s in cpuos.Sandbox.list(api_key=daemon.key_b)}
    assert sandbox.id in alice_ids and sandbox.id not in bob_ids
    assert bob.id in bob_ids and bob.id not in alice_ids

    for owner, other_key in ((sandbox, daemon.key_b), (bob, daemon.key_a)):
        with pytest.raises(cpuos.NotFoundError):
            cpuos.Sandbox.connect(owner.id, api_key=other_key)
        intruder = cpuos.Sandbox(owner.id, api_key=other_key)
        for attempt in (lambda: intruder.exec("true"),
                        lambda: intruder.exec("sleep 1", background=True),
                        lambda: intruder.processes(),
                        lambda: intruder.files.read("/etc/hostname"),
                        lambda: intruder.files.write("/work/intruder", b"x"),
                        lambda: intruder.files.list("/work"),
                        lambda: intruder.files.stat("/work"),
                        lambda: intruder.set_timeout("1h"),
                        lambda: intruder.kill()):
            with pytest.raises(cpuos.NotFoundError):
                attempt()
        assert owner.info().state == "running"
    assert not sandbox.files.exists("/work/intruder")
    # The Unix socket is the administrator: it sees both.
    listing = daemon.http("GET", "/v1/sandboxes?limit=100&state=running", unix=True).json()
    ids = {s["id"] for s in listing["sandboxes"]}
    assert {sandbox.id, bob.id} <= ids


def test_wrong_key_is_authentication_error(daemon):
    with pytest.raises(cpuos.AuthenticationError):
        cpuos.Sandbox.list(api_key="cpuos_not_a_key")


# The daemon dies and comes back

def test_daemon_sigkill_and_restart(daemon, sandbox):
    sandbox.files.write("/work/before-restart.txt", "still here\n")
    sandbox.exec("echo $$ > /tmp/bg.pid; exec sleep 600", background=True)
    time.sleep(1)
    daemon.restart(kill=True)
    listed = {s.id: s for s in cpuos.Sandbox.list()}
    assert sandbox.id in listed and listed[sandbox.id].state == "running"
    again = cpuos.Sandbox.connect(sandbox.id)
    assert again.exec("cat /work/before-restart.txt").stdout == "still here\n"
    # Same VM, not a rebooted one: the process started before the restart still runs.
    assert sandbox.exec("kill -0 $(cat /tmp/bg.pid) && echo yes").stdout == "yes\n"
    sandbox.exec("kill $(cat /tmp/bg.pid)")
    # The keys survived too, and a new sandbox starts.
    assert cpuos.Sandbox.list(api_key=daemon.key_b) is not None
    with cpuos.Sandbox.create(template="base", timeout="2m") as fresh:
        assert fresh.exec("echo new").stdout == "new\n"
    assert fresh.info().state == "stopped"
