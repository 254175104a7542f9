"""A sandbox's console log against a real cpuosd: what the guest writes to its console shows in
GET .../logs, live with follow=true, and stays readable once the sandbox is gone, a panic's
message included ("why did my sandbox die"); another account's key sees none of it."""

import threading
import time

import pytest

import cpuos

pytestmark = pytest.mark.timeout(600)


def test_the_console_log_live_and_after_the_end(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    assert sbx.exec("echo marker-one >/dev/console", user="root").exit_code == 0
    deadline = time.monotonic() + 30
    while "marker-one" not in sbx.get_logs():
        assert time.monotonic() < deadline, sbx.get_logs()[-500:]
        time.sleep(0.2)
    assert len(sbx.get_logs(tail=5)) <= 5

    # follow: the tail first, then what is written after it came.
    got, tail_came, seen = [], threading.Event(), threading.Event()

    def follow():
        for chunk in sbx.follow_logs():
            got.append(chunk)
            text = "".join(got)
            if "marker-one" in text:
                tail_came.set()
            if "marker-two" in text:
                seen.set()
                return

    t = threading.Thread(target=follow, daemon=True)
    t.start()
    assert tail_came.wait(30), "".join(got)[-500:]
    assert sbx.exec("echo marker-two >/dev/console", user="root").exit_code == 0
    assert seen.wait(30), "".join(got)[-500:]

    # A panic ends the sandbox; its log says why, after the end.
    sbx.exec("echo c >/proc/sysrq-trigger", user="root", background=True)
    deadline = time.monotonic() + 60
    while sbx.info().state == "running":
        assert time.monotonic() < deadline, "the sandbox did not end"
        time.sleep(0.2)
    assert sbx.info().end_reason == "panic"
    log = sbx.get_logs(tail=1 << 20)
    assert "marker-one" in log and "Kernel panic" in log, log[-800:]
    # follow on a stopped sandbox: the whole tail, then the end.
    assert "Kernel panic" in "".join(sbx.follow_logs())


def test_logs_are_the_accounts_own_and_bad_requests(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    path = f"/v1/sandboxes/{sbx.id}/logs"
    assert daemon.http("GET", path, key=daemon.key_b).status == 404
    for bad in ("tail=-1", "tail=x", "tail=2000000", "follow=maybe"):
        r = daemon.http("GET", f"{path}?{bad}", key=daemon.key_a)
        assert r.status == 400 and "error" in r.json(), (bad, r)
    r = daemon.http("GET", path, key=daemon.key_a)
    ctype = {k.lower(): v for k, v in r.headers.items()}.get("content-type", "")
    assert r.status == 200 and ctype.startswith("text/plain"), r
    sbx.kill()
    assert daemon.http("GET", path, key=daemon.key_a).status == 200  # kept after a kill
    with pytest.raises(cpuos.NotFoundError):
        cpuos.Sandbox("sbx_0000000000000000", api_key=daemon.key_a, api_url=daemon.url).get_logs()
