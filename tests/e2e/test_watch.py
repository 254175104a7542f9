"""File watching: inside guests, the guest kernel has inotify (and fanotify), so what dev servers
and watchers use works in the templates (node's fs.watch and inotifywait in the node template,
python's watchdog in the python template), each seeing a file written through the files API; and
from outside, GET .../files/watch streams a directory's events (through the SDK's watch_dir too),
overflows cleanly under a flood of 100,000 events, lives through a pause and resume, and refuses
bad requests clearly."""

import http.client
import json
import socket
import threading
import time
import urllib.parse

import pytest

import cpuos

pytestmark = pytest.mark.timeout(600)


def wait_file_has(sbx, path, text, within=60.0):
    deadline = time.monotonic() + within
    got = ""
    while time.monotonic() < deadline:
        if sbx.files.exists(path):
            got = sbx.files.read_text(path)
            if text in got:
                return got
        time.sleep(0.2)
    pytest.fail(f"{text!r} never showed in {path} of {sbx.id}; it holds {got[-500:]!r}")


NODE_WATCHER = """
const fs = require('fs');
fs.watch('/work/src', { recursive: false }, (ev, name) => {
  fs.appendFileSync('/tmp/node-events', `${ev} ${name}\\n`);
});
fs.writeFileSync('/tmp/node-ready', 'ready');
"""

WATCHDOG = """
import time
from watchdog.events import FileSystemEventHandler
from watchdog.observers import Observer
from watchdog.observers.inotify import InotifyObserver

class Log(FileSystemEventHandler):
    def on_any_event(self, event):
        with open("/tmp/py-events", "a") as f:
            f.write(f"{event.event_type} {event.src_path} {getattr(event, 'dest_path', '')}\\n")

obs = Observer()
assert isinstance(obs, InotifyObserver), type(obs)  # not the polling fallback
obs.schedule(Log(), "/work/src", recursive=True)
obs.start()
open("/tmp/py-ready", "w").write("ready")
while True:
    time.sleep(1)
"""


def test_the_kernel_has_inotify_and_fanotify(make_sandbox):
    sbx = make_sandbox(template="base")
    r = sbx.exec("cat /proc/sys/fs/inotify/max_user_watches /proc/sys/fs/fanotify/max_user_groups")
    assert r.exit_code == 0 and all(int(x) > 0 for x in r.stdout.split()), r
    # inotifywait (inotify-tools, in every template) sees a write through the API.
    sbx.files.mkdir("/work/src")
    p = sbx.exec("inotifywait -m -e close_write,moved_to,create /work/src >/tmp/iw-events 2>/tmp/iw-err",
                 background=True)
    wait_file_has(sbx, "/tmp/iw-err", "Watches established")
    sbx.files.write("/work/src/a.txt", "hello")
    got = wait_file_has(sbx, "/tmp/iw-events", "a.txt")
    assert "/work/src/" in got
    p.kill()


class Events:
    """What a watch's on_event got, with a wait for one that matches."""

    def __init__(self):
        self.items = []
        self.cv = threading.Condition()

    def __call__(self, ev):
        with self.cv:
            self.items.append(ev)
            self.cv.notify_all()

    def wait_for(self, kind, path, within=60.0):
        deadline = time.monotonic() + within
        with self.cv:
            while not any(e.type == kind and e.path == path for e in self.items):
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"no {kind} of {path}; events: {[(e.type, e.path) for e in self.items]}")
                self.cv.wait(left)


def test_node_fs_watch_and_a_watch_stream_see_an_api_write(make_sandbox):
    sbx = make_sandbox(template="node")
    sbx.files.mkdir("/work/src")
    sbx.files.write("/tmp/watch.js", NODE_WATCHER)
    p = sbx.exec("node /tmp/watch.js", background=True)
    wait_file_has(sbx, "/tmp/node-ready", "ready")
    events = Events()
    w = sbx.files.watch_dir("/work/src", on_event=events)
    sbx.files.write("/work/src/app.js", "console.log(1)\n")
    got = wait_file_has(sbx, "/tmp/node-events", "app.js")
    assert got.split()[0] in ("rename", "change"), got
    events.wait_for("create", "/work/src/app.js")
    assert events.items[0].name == "app.js" and not events.items[0].is_dir
    assert not any(".cpuos-" in e.path for e in events.items)  # the agent's temporary file is left out
    w.stop()
    p.kill()


def test_python_watchdog_uses_inotify(make_sandbox):
    sbx = make_sandbox(template="python")
    sbx.files.mkdir("/work/src/deep")
    sbx.files.write("/tmp/watch.py", WATCHDOG)
    p = sbx.exec("python3 /tmp/watch.py", background=True)
    wait_file_has(sbx, "/tmp/py-ready", "ready")
    sbx.files.write("/work/src/deep/m.py", "x = 1\n")
    got = wait_file_has(sbx, "/tmp/py-events", "/work/src/deep/m.py")
    # An API write is a temporary file renamed into place: "moved" to it, as watchdog tells it.
    assert any(line.split()[0] in ("created", "moved", "closed") and
               "/work/src/deep/m.py" in line.split()[1:] for line in got.splitlines()), got
    p.kill()


def test_watch_reports_each_kind_of_change(daemon, make_sandbox):
    sbx = make_sandbox(template="base")
    sbx.files.mkdir("/work/w")
    events = Events()
    w = sbx.files.watch_dir("/work/w", on_event=events, recursive=True)
    sbx.files.mkdir("/work/w/sub")
    events.wait_for("create", "/work/w/sub")
    sbx.files.write("/work/w/sub/a.txt", "1")  # in a directory made after the watch began
    events.wait_for("create", "/work/w/sub/a.txt")
    assert sbx.exec("echo more >>/work/w/sub/a.txt && chmod 600 /work/w/sub/a.txt").exit_code == 0
    events.wait_for("write", "/work/w/sub/a.txt")
    events.wait_for("chmod", "/work/w/sub/a.txt")
    sbx.files.rename("/work/w/sub/a.txt", "/work/w/b.txt")
    events.wait_for("rename", "/work/w/sub/a.txt")
    events.wait_for("create", "/work/w/b.txt")
    sbx.files.remove("/work/w/b.txt")
    events.wait_for("remove", "/work/w/b.txt")
    sub = [e for e in events.items if e.path == "/work/w/sub"]
    assert sub[0].type == "create" and all(e.is_dir for e in sub), sub
    w.stop()
    # Without on_event, events queue for get_new_events.
    w = sbx.files.watch_dir("/work/w")
    sbx.files.write("/work/w/c.txt", "x")
    deadline = time.monotonic() + 60
    got = []
    while not any(e.path == "/work/w/c.txt" for e in got) and time.monotonic() < deadline:
        got += w.get_new_events()
        time.sleep(0.1)
    assert any(e.type == "create" and e.path == "/work/w/c.txt" for e in got), got
    w.stop()
    # Bad requests: clear errors, the daemon serves on.
    path = f"/v1/sandboxes/{sbx.id}/files/watch"
    for query, status in (("?path=/work/nothing", 404), ("?path=work", 400), ("", 400),
                          ("?path=/work/w&recursive=maybe", 400), ("?path=/work/../etc", 400)):
        r = daemon.http("GET", path + query, key=daemon.key_a)
        assert r.status == status and "error" in r.json(), (query, r)
    r = daemon.http("GET", path + "?path=/work/w", key=daemon.key_b)
    assert r.status == 404, r
    with pytest.raises(cpuos.NotFoundError):
        sbx.files.watch_dir("/work/missing")


def test_a_flood_of_100000_events_overflows_cleanly(daemon, make_sandbox):
    """A reader that stops reading while 100,000 files are made: the queues fill, the stream says
    "overflow" once they did, and goes on with what comes after."""
    sbx = make_sandbox(template="base")
    sbx.files.mkdir("/work/flood")
    u = urllib.parse.urlparse(daemon.url)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the reader's side holds little
    sock.connect((u.hostname, u.port))
    sock.settimeout(300)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    conn.sock = sock
    conn.request("GET", f"/v1/sandboxes/{sbx.id}/files/watch?path=/work/flood",
                 headers={"Authorization": f"Bearer {daemon.key_a}"})
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    r = sbx.exec("cd /work/flood && seq 1 100000 | xargs touch && echo done", timeout="10m")
    assert r.exit_code == 0 and r.stdout == "done\n", r
    kinds, seen_last, n = {}, False, 0
    while not seen_last:
        line = resp.readline()
        assert line, "the watch stream ended"
        ev = json.loads(line)
        n += 1
        kinds[ev["type"]] = kinds.get(ev["type"], 0) + 1
        if ev["type"] == "overflow" and kinds["overflow"] == 1:
            assert ev["path"] == "/work/flood" and ev["reason"], ev
            # The queue behind the overflow is read: what happens now is seen.
            sbx.files.write("/work/flood/last.txt", "after the flood")
        seen_last = ev["type"] == "create" and ev["path"] == "/work/flood/last.txt"
    assert kinds.get("overflow", 0) >= 1 and n < 100000, (n, kinds)
    conn.close()
    assert daemon.http("GET", "/v1/health").status == 200


def test_a_watch_lives_through_pause_and_resume(make_sandbox):
    sbx = make_sandbox(template="base")
    events = Events()
    w = sbx.files.watch_dir("/work", on_event=events)
    sbx.files.write("/work/before.txt", "1")
    events.wait_for("create", "/work/before.txt")
    sbx.pause()
    sbx.resume()
    events.wait_for("overflow", "/work")  # events of the gap, if any, are not silently lost
    assert "paused" in [e for e in events.items if e.type == "overflow"][0].reason
    sbx.files.write("/work/after.txt", "2")
    events.wait_for("create", "/work/after.txt")
    w.stop()
