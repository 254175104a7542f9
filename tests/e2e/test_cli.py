"""cpuos-vm as a user runs it: real microVMs, exit codes, streams, stdin,
timeouts, users, templates, and how it fails (missing files, bad usage).
Each case boots its own VM (about 1-2 s under TCG), so the suite takes a
minute or so; a case that cannot run fails, it never skips (tests/run.sh).
"""
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLI = Path(os.environ.get("CPUOS_VM_BIN") or REPO / "build" / "bin" / "cpuos-vm")
RUN_TIMEOUT = 300  # a boot plus the command, with room for a slow TCG host


def qemu_pids(run_dir):
    """PIDs of QEMU processes whose command line names run_dir: the VMs
    started under it (their sockets live there)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes()
        except OSError:
            continue
        if b"qemu-system" in cmdline and run_dir.encode() in cmdline:
            pids.append(int(entry))
    return pids


@pytest.fixture(scope="session")
def run_dir():
    # Short, under /tmp: QEMU's socket paths inside must fit sun_path.
    path = tempfile.mkdtemp(prefix="cpuos-", dir="/tmp")
    yield path
    # A failed case may have left a VM behind: stop it, not someone else's.
    for pid in qemu_pids(path):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session")
def env(run_dir):
    assert CLI.is_file() and os.access(CLI, os.X_OK), f"{CLI} is missing: run make"
    e = dict(os.environ)
    e["CPUOS_RUN_DIR"] = run_dir  # CPUOS_GUEST_DIR stays as given (default build/guest)
    return e


def cpuos_vm(env, *args, stdin=None, timeout=RUN_TIMEOUT):
    """Runs `cpuos-vm ARGS...` to completion; bytes in, bytes out."""
    return subprocess.run(
        [str(CLI), *args],
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=timeout,
    )


def vm_run(env, *args, **kw):
    return cpuos_vm(env, "run", *args, **kw)


def assert_one_error_line(r):
    """The runner's own failure: exactly one 'cpuos-vm: ...' line on stderr
    and nothing on stdout. Returns the line."""
    err = r.stderr.decode(errors="replace")
    lines = err.splitlines()
    assert len(lines) == 1 and err.endswith("\n"), f"stderr is not one line: {err!r}"
    assert lines[0].startswith("cpuos-vm: "), lines[0]
    assert r.stdout == b""
    return lines[0]


# --- exit codes ---


@pytest.mark.parametrize(
    "args, code",
    [
        (["-c", "exit 3"], 3),
        (["--", "true"], 0),
        (["--", "false"], 1),
        (["-c", "kill -9 $$"], 128 + 9),  # death by signal N is 128+N
    ],
)
def test_exit_code_passthrough(env, args, code):
    r = vm_run(env, *args)
    assert r.returncode == code, r.stderr


# --- streams ---


def test_stdout_and_stderr_kept_apart(env):
    r = vm_run(env, "-c", "echo out; echo err >&2")
    assert r.returncode == 0
    assert r.stdout == b"out\n"
    assert r.stderr == b"err\n"


def test_output_is_streamed(env):
    """Each stream's first line reaches us while the command still runs,
    not when it ends."""
    p = subprocess.Popen(
        [str(CLI), "run", "-c", "echo out1; echo err1 >&2; sleep 3; echo out2; echo err2 >&2"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    watchdog = threading.Timer(RUN_TIMEOUT, p.kill)  # readline has no timeout
    watchdog.start()
    try:
        first_out = p.stdout.readline()
        first_err = p.stderr.readline()
        seen = time.monotonic()
        rest_out, rest_err = p.communicate()
        ended = time.monotonic()
    finally:
        watchdog.cancel()
        p.kill()
    assert p.returncode == 0
    assert (first_out, rest_out) == (b"out1\n", b"out2\n")
    assert (first_err, rest_err) == (b"err1\n", b"err2\n")
    assert ended - seen >= 2.0, "first lines arrived only at the end"


def test_stdin_round_trip(env):
    data = os.urandom(1 << 20)
    r = vm_run(env, "-i", "--", "sha256sum", stdin=data)
    assert r.returncode == 0, r.stderr
    assert r.stdout.decode() == hashlib.sha256(data).hexdigest() + "  -\n"


# --- limits and users ---


def test_timeout(env):
    start = time.monotonic()
    r = vm_run(env, "--timeout", "1", "--", "sleep", "30")
    took = time.monotonic() - start
    assert r.returncode == 124, r.stderr
    assert took < 15, f"--timeout 1 took {took:.1f} s"


def test_user(env):
    r = vm_run(env, "-u", "user", "-c", "id -un")
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"user\n"


def test_python_template(env):
    r = vm_run(
        env, "-T", "python", "--", "python3", "-c",
        "import pandas; print(pandas.Series([1,2,3]).sum())",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == b"6\n"


# --- failures of the runner itself ---


@pytest.mark.parametrize(
    "args, what, name",
    [
        (["--kernel", "/nonexistent"], "kernel", "/nonexistent"),
        (["-T", "nosuch"], "template", "nosuch"),
        (["--qemu", "/nonexistent/qemu"], "QEMU", "/nonexistent/qemu"),
    ],
)
def test_missing_file(env, args, what, name):
    r = vm_run(env, *args, "--", "true", timeout=60)
    line = assert_one_error_line(r)
    assert r.returncode == 125
    assert what in line and name in line, line


@pytest.mark.parametrize(
    "args, mentions",
    [
        ([], "command"),
        (["--vcpus", "abc", "--", "true"], "--vcpus"),
        (["--accel", "xen", "--", "true"], "xen"),
    ],
)
def test_bad_usage(env, args, mentions):
    start = time.monotonic()
    r = vm_run(env, *args, timeout=60)
    assert r.returncode != 0
    line = assert_one_error_line(r)
    assert mentions in line, line
    assert time.monotonic() - start < 10, "bad usage must fail before booting"


def test_help(env):
    r = cpuos_vm(env, "--help", timeout=60)
    assert r.returncode == 0
    assert b"--template" in r.stdout


# --- interruption ---


def test_interrupt_leaves_no_vm(env):
    """Ctrl-C on cpuos-vm ends it and its VM: QEMU runs in its own session
    (so the terminal's SIGINT does not reach it), which makes stopping it the
    CLI's job."""
    own_dir = tempfile.mkdtemp(prefix="cpuos-int-", dir="/tmp")
    e = dict(env, CPUOS_RUN_DIR=own_dir)
    p = subprocess.Popen(
        [str(CLI), "run", "-c", "echo ready; sleep 60"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=e,
    )
    watchdog = threading.Timer(RUN_TIMEOUT, p.kill)
    watchdog.start()
    try:
        assert p.stdout.readline() == b"ready\n"  # booted and running
        p.send_signal(signal.SIGINT)
        p.wait(timeout=20)
        deadline = time.monotonic() + 10
        while qemu_pids(own_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = qemu_pids(own_dir)
        assert p.returncode != 0
        assert not left, f"QEMU {left} still runs after cpuos-vm was interrupted"
    finally:
        watchdog.cancel()
        p.kill()
        p.wait()
        for pid in qemu_pids(own_dir):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(own_dir, ignore_errors=True)
