"""Hostile commands through the real daemon and the SDK: a fork bomb, a CPU hog, a memory hog and a
process that ignores signals, each in a default sandbox (1 vCPU, 512 MiB).

Each ends on time (its timeout, or the OOM killer for the memory hog, within 2 s of the limit) and
the sandbox then answers `echo ok`; nothing of the command is left behind. The guest's limits are in
docs/agent-protocol.md (Processes, Limits). Each case prints the daemon's RSS (run with -s)."""

import threading
import time

import pytest

import cpuos

SLACK = 2.0  # seconds past a command's timeout by which its answer must be back
ECHO_LIMIT = 3.0  # seconds for `echo ok` right after a hostile command


def daemon_rss_kb(daemon):
    with open(f"/proc/{daemon.proc.pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def note(daemon, what, **values):
    shown = " ".join(f"{k}={v}" for k, v in values.items())
    print(f"\n{what}: {shown} daemon_rss={daemon_rss_kb(daemon)}kB", flush=True)


def timed_exec(sbx, cmd, timeout):
    """Runs cmd with timeout; returns (result, timed_out, seconds)."""
    t0 = time.monotonic()
    try:
        result, timed_out = sbx.exec(cmd, timeout=timeout), False
    except cpuos.TimeoutError as e:
        assert e.result is not None, "a command's TimeoutError carries its partial result"
        result, timed_out = e.result, True
    return result, timed_out, time.monotonic() - t0


def answers_ok(sbx, daemon, when, limit=ECHO_LIMIT):
    t0 = time.monotonic()
    r = sbx.exec("echo ok", timeout=30)
    took = time.monotonic() - t0
    note(daemon, f"echo ok {when}", seconds=f"{took:.2f}")
    assert r.exit_code == 0 and r.stdout == "ok\n"
    assert took <= limit, f"echo ok took {took:.2f}s {when}"


def wait_gone(sbx, name, limit=10.0):
    """Waits until no process called name is left in the guest; returns how many are left."""
    deadline = time.monotonic() + limit
    while True:
        r = sbx.exec(["pgrep", "-c", "-x", name], timeout=30)
        left = int(r.stdout.strip() or "-1")
        if left == 0 or time.monotonic() >= deadline:
            return left
        time.sleep(0.5)


@pytest.fixture
def hostile(make_sandbox):
    """A sandbox of the daemon's default size; commands run as its default user."""
    return make_sandbox(template="base", timeout="10m")


def test_timeout_fires_on_time(daemon, hostile):
    result, timed_out, took = timed_exec(hostile, "sleep 600", 3)
    note(daemon, "sleep 600, timeout 3s", seconds=f"{took:.2f}", signal=result.signal)
    assert timed_out and result.timed_out
    assert 3.0 <= took <= 3.0 + SLACK
    answers_ok(hostile, daemon, "after the timeout")


def test_fork_bomb_timeout(daemon, hostile):
    # The leader stays (exec needs no fork) while the bomb grows under it.
    result, timed_out, took = timed_exec(
        hostile, "bomb() { bomb | bomb & }; bomb; exec sleep 600", 5)
    note(daemon, "fork bomb, timeout 5s", seconds=f"{took:.2f}", signal=result.signal)
    assert timed_out and result.signal == 9
    assert took <= 5.0 + SLACK
    answers_ok(hostile, daemon, "after the fork bomb")
    assert wait_gone(hostile, "sh") == 0


def test_fork_bomb_leftovers(daemon, hostile):
    # The user's report: the leader returns at once and leaves the bomb holding its pipes.
    result, timed_out, took = timed_exec(hostile, "bomb() { bomb | bomb & }; bomb", 5)
    note(daemon, "fork bomb left behind, timeout 5s", seconds=f"{took:.2f}",
         exit_code=result.exit_code)
    assert took <= 5.0 + SLACK
    answers_ok(hostile, daemon, "while the bomb runs")
    time.sleep(max(0.0, 5.0 - took))
    # The timeout covers what the command left behind: by now it is killed.
    assert wait_gone(hostile, "sh") == 0
    answers_ok(hostile, daemon, "after the bomb's timeout")


def test_cpu_hog_timeout(daemon, hostile):
    # The hog runs in a thread; meanwhile the same sandbox must answer another exec.
    other = cpuos.Sandbox.connect(hostile.id, api_key=daemon.key_a, api_url=daemon.url)
    done = {}
    hog = threading.Thread(target=lambda: done.update(zip(("result", "timed_out", "took"), timed_exec(
        other, "i=0; while [ $i -lt 32 ]; do (while :; do :; done) & i=$((i+1)); done; "
               "while :; do :; done", 6))))
    hog.start()
    try:
        time.sleep(2)
        # Its own cgroup weighs as much as the hog's: half the CPU, not a 34th.
        answers_ok(hostile, daemon, "while 33 spinners run", limit=2.0)
    finally:
        hog.join(90)
    assert done, "the CPU hog's exec did not answer"
    note(daemon, "33 spinners, timeout 6s", seconds=f"{done['took']:.2f}",
         signal=done["result"].signal)
    assert done["timed_out"] and done["result"].signal == 9
    assert done["took"] <= 6.0 + SLACK
    answers_ok(hostile, daemon, "after the CPU hog")


def test_memory_hog(daemon, hostile):
    # An OOM inside the sandbox's limit takes the whole command (its leader too), not the agent.
    result, timed_out, took = timed_exec(
        hostile, "for i in 1 2 3; do tail /dev/zero & done; wait", 90)
    note(daemon, "memory hog, timeout 90s", seconds=f"{took:.2f}", signal=result.signal,
         exit_code=result.exit_code)
    assert not timed_out and result.signal == 9
    answers_ok(hostile, daemon, "after the memory hog")
    assert wait_gone(hostile, "tail") == 0


def test_ignores_sigterm_timeout(daemon, hostile):
    result, timed_out, took = timed_exec(
        hostile, "trap '' TERM INT HUP QUIT USR1 USR2; "
                 "setsid sh -c \"trap '' TERM INT HUP; while :; do sleep 1; done\" & "
                 "while :; do sleep 1; done", 3)
    note(daemon, "ignores SIGTERM, timeout 3s", seconds=f"{took:.2f}", signal=result.signal)
    assert timed_out and result.signal == 9
    assert took <= 3.0 + SLACK
    answers_ok(hostile, daemon, "after the signal-proof command")
    assert wait_gone(hostile, "sleep") == 0
