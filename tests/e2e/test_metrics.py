"""Metrics per sandbox against a real cpuosd: a sample every few seconds, CPU from the host (its
QEMU's time) rising under a CPU hog and falling after it, memory, disk and network from the guest;
another account's key sees none of it; a paused sandbox keeps its samples without being resumed;
GET /metrics over TCP shows the caller's account only, the socket the daemon and each sandbox."""

import datetime
import re
import time

import pytest

pytestmark = pytest.mark.timeout(600)


def when(sample):
    return datetime.datetime.fromisoformat(sample["timestamp"].replace("Z", "+00:00")).timestamp()


def wait_sample(sbx, after, pred, what, within=90.0):
    """The first sample taken after `after` (Unix time) that pred accepts."""
    deadline = time.monotonic() + within
    seen = []
    while time.monotonic() < deadline:
        seen = [m for m in sbx.get_metrics() if when(m) > after]
        for m in seen:
            if pred(m):
                return m
        time.sleep(1)
    pytest.fail(f"no sample {what} after {after}: {seen[-5:]}")


def test_cpu_rises_under_a_hog_and_falls_after(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    first = wait_sample(sbx, 0, lambda m: True, "at all")
    assert first["cpu_count"] == 1 and 0 <= first["cpu_used_pct"] <= 100
    assert 256 << 20 < first["mem_total"] <= 512 << 20 and 0 < first["mem_used"] < first["mem_total"]
    assert first["disk_total"] > 1 << 30 and 0 < first["disk_used"] < first["disk_total"]
    assert first["net_rx_bytes"] >= 0 and first["net_tx_bytes"] >= 0
    start = time.time()
    hog = sbx.exec("while :; do :; done", background=True)
    busy = wait_sample(sbx, start + 1, lambda m: m["cpu_used_pct"] > 60, "above 60% CPU")
    hog.kill()
    stop = time.time()
    idle = wait_sample(sbx, stop + 1, lambda m: m["cpu_used_pct"] < 30, "below 30% CPU")
    assert busy["cpu_used_pct"] > idle["cpu_used_pct"]
    # Memory the guest takes shows.
    before = sbx.get_metrics(limit=1)[0]["mem_used"]
    # dd holds its 150 MB block while the pipe it writes to is never read.
    hold = sbx.exec("dd if=/dev/zero bs=150M count=1 2>/dev/null | sleep 600", background=True)
    wait_sample(sbx, time.time(), lambda m: m["mem_used"] > before + (100 << 20), "with 100 MB more in use")
    hold.kill()
    samples = sbx.get_metrics()
    assert samples == sorted(samples, key=when) and len(sbx.get_metrics(limit=2)) == 2


def test_another_account_sees_nothing(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    wait_sample(sbx, 0, lambda m: True, "at all")
    r = daemon.http("GET", f"/v1/sandboxes/{sbx.id}/metrics", key=daemon.key_b)
    assert r.status == 404, r
    r = daemon.http("GET", f"/v1/sandboxes/metrics?ids={sbx.id}", key=daemon.key_b)
    assert r.status == 200 and r.json()["sandboxes"] == [], r
    r = daemon.http("GET", "/v1/sandboxes/metrics", key=daemon.key_b)
    assert r.status == 200 and sbx.id not in [x["sandbox_id"] for x in r.json()["sandboxes"]], r
    r = daemon.http("GET", f"/v1/sandboxes/metrics?ids={sbx.id},sbx_0000000000000000", key=daemon.key_a)
    assert [x["sandbox_id"] for x in r.json()["sandboxes"]] == [sbx.id], r
    r = daemon.http("GET", "/v1/sandboxes/metrics", key=daemon.key_a)
    assert sbx.id in [x["sandbox_id"] for x in r.json()["sandboxes"]], r
    for bad in ("limit=0", "limit=121", "limit=x"):
        r = daemon.http("GET", f"/v1/sandboxes/{sbx.id}/metrics?{bad}", key=daemon.key_a)
        assert r.status == 400 and "limit" in r.json()["error"]["message"], r

    # GET /metrics over TCP: this account's sandboxes only, no daemon counters, no series of
    # other accounts' sandboxes; on the socket, everything.
    bob = daemon.http("GET", "/metrics", key=daemon.key_b).body.decode()
    bob_running = len(daemon.http("GET", "/v1/sandboxes?state=running", key=daemon.key_b).json()["sandboxes"])
    assert f'cpuos_sandboxes{{state="running"}} {bob_running}\n' in bob, bob
    assert "cpuos_creates_total" not in bob and sbx.id not in bob
    alice = daemon.http("GET", "/metrics", key=daemon.key_a).body.decode()
    assert "cpuos_creates_total" not in alice and "cpuos_sandbox_cpu_used_percent" not in alice
    admin = daemon.http("GET", "/metrics", unix=True).body.decode()
    assert "cpuos_creates_total" in admin
    assert re.search(rf'cpuos_sandbox_cpu_used_percent{{sandbox="{sbx.id}"}} [0-9.]+\n', admin), admin
    assert re.search(rf'cpuos_sandbox_memory_total_bytes{{sandbox="{sbx.id}"}} [0-9]+\n', admin), admin


def test_a_paused_sandbox_keeps_its_samples(make_sandbox):
    sbx = make_sandbox(template="base")
    wait_sample(sbx, 0, lambda m: True, "at all")
    sbx.pause()
    kept = sbx.get_metrics()
    assert kept and sbx.info().state == "paused"  # reading them did not resume it
    sbx.resume()
    wait_sample(sbx, time.time(), lambda m: m["mem_total"] > 0, "after the resume")
