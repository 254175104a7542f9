"""Limits: the per-account sandbox count under parallel creates (429 past it, other accounts
unaffected), an account's totals of vCPUs and memory, the host's memory overcommit, and a
sandbox's own process limit."""
import json
import threading

from conftest import Daemon


def test_parallel_creates_respect_the_limit():
    d = Daemon(extra_args=["--max-sandboxes", "2"])
    d.start()
    try:
        key = d.create_key("quota")
        statuses, lock = [], threading.Lock()

        def create():
            r = d.http("POST", "/v1/sandboxes", body=json.dumps({"template": "base"}), key=key)
            with lock:
                statuses.append(r.status)

        threads = [threading.Thread(target=create) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(statuses) == [201, 201, 429, 429]
        # The limit is per account: the administrator's socket account still has room.
        r = d.http("POST", "/v1/sandboxes", body=json.dumps({"template": "base"}), unix=True)
        assert r.status == 201
    finally:
        d.close()


def test_account_totals_of_vcpus_and_memory():
    """What an account's running sandboxes hold in all: past it 429 with the figures, under it
    a create still goes, and a kill gives the room back."""
    d = Daemon(extra_args=["--account-max-vcpus", "3", "--account-max-memory-mb", "1024",
                           "--template-snapshots", "off"])
    d.start()
    try:
        key = d.create_key("totals")

        def create(**kw):
            return d.http("POST", "/v1/sandboxes", body={"template": "base", **kw}, key=key)

        a = create(vcpus=2, memory_mb=256)
        assert a.status == 201, a
        r = create(vcpus=2, memory_mb=256)
        assert r.status == 429 and "would run 4 vCPUs, over its 3" in r.json()["error"]["message"], r
        r = create(vcpus=1, memory_mb=1024)
        assert r.status == 429 and "1280 MB of guest memory, over its 1024 MB" in r.json()["error"]["message"], r
        b = create(vcpus=1, memory_mb=768)
        assert b.status == 201, b
        assert d.http("DELETE", f"/v1/sandboxes/{a.json()['id']}", key=key).status == 204
        assert create(vcpus=2, memory_mb=256).status == 201
    finally:
        d.close()


def test_host_memory_is_not_overcommitted():
    """A start that would take guest memory past the ratio of the host's RAM is refused with
    503 and the figures, for a create and for a resume; nothing is left half made."""
    with open("/proc/meminfo") as f:
        total_mb = next(int(line.split()[1]) // 1024 for line in f if line.startswith("MemTotal:"))
    # room for one 512 MB sandbox and not for two
    ratio = 800 / total_mb
    d = Daemon(extra_args=["--memory-overcommit", f"{ratio:.6f}", "--template-snapshots", "off"])
    d.start()
    try:
        key = d.create_key("host")
        a = d.http("POST", "/v1/sandboxes", body={"template": "base"}, key=key)
        assert a.status == 201, a
        r = d.http("POST", "/v1/sandboxes", body={"template": "base"}, key=key)
        msg = r.json()["error"]["message"]
        assert r.status == 503 and "the host has no memory for 512 MB more" in msg, r
        assert "sandboxes hold 512 MB" in msg, msg
        listed = d.http("GET", "/v1/sandboxes", key=key).json()["sandboxes"]
        assert [s["id"] for s in listed] == [a.json()["id"]]
        # paused, it holds no memory: another starts, and then the pause cannot resume
        sid = a.json()["id"]
        assert d.http("POST", f"/v1/sandboxes/{sid}/pause", key=key).status == 200
        b = d.http("POST", "/v1/sandboxes", body={"template": "base"}, key=key)
        assert b.status == 201, b
        r = d.http("POST", f"/v1/sandboxes/{sid}/resume", key=key)
        assert r.status == 503 and "the host has no memory" in r.json()["error"]["message"], r
    finally:
        d.close()


def test_max_processes_holds_in_the_guest(make_sandbox):
    """max_processes bounds everything the sandbox runs together: 60 sleeps asked for, the guest
    kernel stops the forks at 32 processes in all; and it only lowers the agent's own limit."""
    sbx = make_sandbox(template="base", max_processes=32)
    r = sbx.exec("cd /sys/fs/cgroup/cpuos; cat pids.max; "
                 # a shell that cannot fork exits: in a subshell of its own
                 "(for i in $(seq 60); do sleep 30 & done) 2>/dev/null; "
                 # then builtins only: no fork is left to this shell
                 "read c < pids.current; echo $c; n=0; for f in /proc/[0-9]*/comm; do "
                 "read p < $f; [ \"$p\" = sleep ] && n=$((n + 1)); done; echo $n", timeout=60)
    limit, current, sleeps = r.stdout.split()
    assert limit == "32" and int(current) <= 32, r.stdout
    assert 16 < int(sleeps) < 60, r.stdout  # many started, and not all
    big = make_sandbox(template="base", max_processes=65536)
    own = big.exec("cat /sys/fs/cgroup/cpuos/pids.max", timeout=60).stdout.strip()
    assert own != "65536" and int(own) <= 4096, own
