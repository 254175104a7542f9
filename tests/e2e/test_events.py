"""Lifecycle events and webhooks against a real cpuosd: a sandbox's created, paused, resumed,
forked, checkpointed and killed events in GET /v1/events (its account's only), and posted in order
to a webhook receiver on loopback with signatures that check; a receiver that is down gets them
later, with each failed attempt in the delivery log; webhooks are the Unix socket's to make."""

import hashlib
import hmac
import http.server
import json
import threading
import time
import uuid

import pytest

import cpuos
from conftest import free_port

pytestmark = pytest.mark.timeout(600)


class Receiver:
    """An HTTP server on loopback that keeps every POST (headers and body) and answers 204."""

    def __init__(self, port=0):
        got = self.got = []
        cv = self.cv = threading.Condition()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with cv:
                    got.append((dict(self.headers), body))
                    cv.notify_all()
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self, sbx_id):
        return [json.loads(b) for _, b in self.got if json.loads(b)["sandbox_id"] == sbx_id]

    def wait_types(self, sbx_id, types, within=60.0):
        deadline = time.monotonic() + within
        with self.cv:
            while [e["type"] for e in self.events(sbx_id)][:len(types)] != types:
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"{sbx_id}: got {[e['type'] for e in self.events(sbx_id)]}, "
                                f"wanted {types}")
                self.cv.wait(left)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def webhook(daemon, account, url, events=None):
    r = daemon.http("POST", "/v1/webhooks", {"account": account, "url": url, "events": events or []},
                    unix=True)
    assert r.status == 201, r
    return r.json()


@pytest.fixture(scope="module")
def hooked(daemon):
    """An account of the module's own, so no other test's sandboxes send it events."""
    return daemon.create_key(f"hooked-{uuid.uuid4().hex[:6]}")


def account_of(daemon, key):
    return daemon.http("GET", "/v1/usage", key=key).json()["account"]


def test_events_and_a_signed_webhook_in_order(daemon, hooked):
    receiver = Receiver()
    try:
        hook = webhook(daemon, account_of(daemon, hooked), f"http://127.0.0.1:{receiver.port}/hook")
        assert hook["id"].startswith("whk_") and hook["secret"].startswith("whsec_")
        sbx = cpuos.Sandbox.create(template="base", api_key=hooked, api_url=daemon.url)
        sbx.pause()
        sbx.resume()
        child = sbx.fork()[0]
        sbx.checkpoint(f"ck-{uuid.uuid4().hex[:6]}")
        sbx.kill()
        child.kill()
        want = ["created", "paused", "resumed", "forked", "checkpointed", "killed"]
        receiver.wait_types(sbx.id, want)
        receiver.wait_types(child.id, ["created", "killed"])
        # Every body is signed: HMAC-SHA256 of "<timestamp>.<body>" with the webhook's secret.
        for headers, body in receiver.got:
            ts = headers["X-Cpuos-Timestamp"]
            mac = hmac.new(hook["secret"].encode(), ts.encode() + b"." + body, hashlib.sha256)
            assert headers["X-Cpuos-Signature"] == "sha256=" + mac.hexdigest()
            assert abs(int(ts) - time.time()) < 300
            assert headers["X-Cpuos-Event"] == json.loads(body)["type"]
        ev = receiver.events(sbx.id)
        assert [e["cause"] for e in ev[:3]] == [None, "api", None] and ev[-1]["cause"] == "api"
        # The same events in the log, the account's own only.
        r = daemon.http("GET", f"/v1/events?sandbox={sbx.id}", key=hooked)
        assert [e["type"] for e in r.json()["events"]] == want, r
        seqs = [e["seq"] for e in r.json()["events"]]
        assert seqs == sorted(seqs)
        since = daemon.http("GET", f"/v1/events?sandbox={sbx.id}&since={seqs[2]}", key=hooked)
        assert [e["type"] for e in since.json()["events"]] == want[3:]
        assert daemon.http("GET", f"/v1/events?sandbox={sbx.id}", key=daemon.key_b).json()["events"] == []
        deliveries = daemon.http("GET", f"/v1/webhooks/{hook['id']}/deliveries", unix=True).json()
        assert all(d["status"] == 204 for d in deliveries["deliveries"]), deliveries
    finally:
        receiver.close()


def test_a_receiver_that_is_down_gets_the_events_later(daemon):
    key = daemon.create_key(f"later-{uuid.uuid4().hex[:6]}")
    port = free_port()
    hook = webhook(daemon, account_of(daemon, key), f"http://127.0.0.1:{port}/", ["created", "killed"])
    sbx = cpuos.Sandbox.create(template="base", api_key=key, api_url=daemon.url)
    sbx.pause()  # not a type it wants: skipped
    sbx.kill()
    # Nothing listens: attempts fail and are logged.
    deadline = time.monotonic() + 60
    failed = []
    while not failed:
        assert time.monotonic() < deadline, "no failed attempt was logged"
        d = daemon.http("GET", f"/v1/webhooks/{hook['id']}/deliveries", unix=True).json()["deliveries"]
        failed = [x for x in d if x["status"] is None and x["error"]]
        time.sleep(0.2)
    receiver = Receiver(port)
    try:
        receiver.wait_types(sbx.id, ["created", "killed"], within=120)
        assert len(receiver.events(sbx.id)) == 2
    finally:
        receiver.close()
    r = daemon.http("DELETE", f"/v1/webhooks/{hook['id']}", unix=True)
    assert r.status == 204
    assert daemon.http("DELETE", f"/v1/webhooks/{hook['id']}", unix=True).status == 404


def test_webhooks_are_the_sockets_and_bad_ones_are_refused(daemon):
    r = daemon.http("POST", "/v1/webhooks", {"account": "alice", "url": "http://127.0.0.1:1/"},
                    key=daemon.key_a)
    assert r.status == 404, r  # over TCP, with a key: no such route
    assert daemon.http("GET", "/v1/webhooks", key=daemon.key_a).status == 404
    for body in ({"account": "alice", "url": "ftp://x/"}, {"account": "alice", "url": "http://a b/"},
                 {"url": "http://127.0.0.1:1/"}, {"account": "alice", "url": "http://x/", "events": ["nope"]},
                 {"account": "alice", "url": "http://x/", "events": "paused"}):
        r = daemon.http("POST", "/v1/webhooks", body, unix=True)
        assert r.status == 422 and "error" in r.json(), (body, r)
    listed = daemon.http("GET", "/v1/webhooks", unix=True).json()["webhooks"]
    assert all("secret" not in w for w in listed)
    for bad in ("since=-1", "limit=0", "limit=5000", "since=x"):
        assert daemon.http("GET", f"/v1/events?{bad}", key=daemon.key_a).status == 400
