"""The per-account sandbox limit holds under parallel creates (429 past it, other accounts unaffected)."""
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
