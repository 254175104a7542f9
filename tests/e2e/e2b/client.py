"""E2B's own SDKs against cpuos-e2b, as a user writes them: run under a virtualenv holding one
pinned version of `e2b` and `e2b-code-interpreter` (tests/e2e/test_e2b.py makes them), with
E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY set. Each call is a check; a line of JSON per check
says whether it passed: {"call": "commands.run", "ok": true} or with "error". Exits 0 when all
passed."""
import json
import os
import sys
import time
import traceback

import e2b
from e2b import Sandbox

RESULTS = []


def check(name):
    def wrap(fn):
        def run(*a, **kw):
            t0 = time.monotonic()
            try:
                out = fn(*a, **kw)
                RESULTS.append({"call": name, "ok": True, "ms": round((time.monotonic() - t0) * 1000)})
                print(json.dumps(RESULTS[-1]), flush=True)
                return out
            except Exception as e:  # every failure is a row of the matrix
                RESULTS.append({"call": name, "ok": False, "error": f"{type(e).__name__}: {e}"[:600],
                                "trace": traceback.format_exc()[-1500:]})
                print(json.dumps(RESULTS[-1]), flush=True)
                return None
        return run
    return wrap


def need(cond, what):
    if not cond:
        raise AssertionError(what)


@check("Sandbox.create")
def create(**kw):
    sbx = Sandbox.create(timeout=600, metadata={"suite": "e2b", "run": RUN}, **kw)
    need(len(sbx.sandbox_id) == 16, sbx.sandbox_id)
    return sbx


@check("commands.run")
def run_echo(sbx):
    r = sbx.commands.run("echo hi; echo err >&2")
    need(r.exit_code == 0 and r.stdout == "hi\n" and r.stderr == "err\n", repr(r))
    # without stdin=True a command reads end of file, as from envd's /dev/null
    r = sbx.commands.run("cat; echo end", timeout=60)
    need(r.stdout == "end\n", repr(r))


@check("commands.run exit code")
def run_fail(sbx):
    try:
        sbx.commands.run("exit 3")
    except e2b.CommandExitException as e:
        need(e.exit_code == 3, repr(e))
        return
    raise AssertionError("no CommandExitException")


@check("commands.run background + wait")
def run_background(sbx):
    h = sbx.commands.run("sleep 1; echo done", background=True)
    need(h.pid > 0, h.pid)
    listed = [p.pid for p in sbx.commands.list()]
    need(h.pid in listed, f"{h.pid} not in {listed}")
    r = h.wait()
    need(r.stdout == "done\n", repr(r))


@check("commands.send_stdin + kill")
def run_stdin(sbx):
    h = sbx.commands.run("read x; read y; echo got $x $y; sleep 600", background=True, stdin=True)
    sbx.commands.send_stdin(h.pid, "abc\n")
    if hasattr(sbx.commands, "stream_input"):  # a client stream (StreamInput)
        sbx.commands.stream_input(h.pid, ["d", b"ef\n"])
    else:
        sbx.commands.send_stdin(h.pid, "def\n")
    deadline = time.monotonic() + 60
    seen = []
    for stdout, _, _ in h:
        if stdout:
            seen.append(stdout)
        if "got abc def" in "".join(seen) or time.monotonic() > deadline:
            break
    need("got abc def" in "".join(seen), seen)
    need(sbx.commands.kill(h.pid), "kill returned false")


@check("files.write/read")
def files_rw(sbx):
    info = sbx.files.write("/tmp/e2b/a.txt", "hello")
    need(info.path == "/tmp/e2b/a.txt", info)
    need(sbx.files.read("/tmp/e2b/a.txt") == "hello", "read back")
    blob = bytes(range(256)) * 64
    sbx.files.write("/tmp/e2b/b.bin", blob)
    need(bytes(sbx.files.read("/tmp/e2b/b.bin", format="bytes")) == blob, "bytes back")
    sbx.files.write_files([{"path": "/tmp/e2b/c1", "data": "1"}, {"path": "/tmp/e2b/c2", "data": b"2"}])
    need(sbx.files.read("/tmp/e2b/c2") == "2", "write_files")


@check("files.write gzip")
def files_gzip(sbx):
    text = "zipped " * 5000
    sbx.files.write("/tmp/e2b/gz.txt", text, gzip=True)
    need(sbx.files.read("/tmp/e2b/gz.txt") == text, "gzip upload read back")


@check("download_url/upload_url (signed)")
def files_signed(sbx):
    import urllib.request
    url = sbx.download_url("/tmp/e2b/a.txt", use_signature_expiration=600)
    need("signature=" in url, url)
    need(urllib.request.urlopen(url, timeout=60).read() == b"hello", url)
    up = sbx.upload_url("/tmp/e2b/up.txt", use_signature_expiration=600)
    body = (b"--x\r\nContent-Disposition: form-data; name=\"file\"; filename=\"up.txt\"\r\n\r\n"
            b"uploaded\r\n--x--\r\n")
    req = urllib.request.Request(up, data=body, method="POST",
                                 headers={"Content-Type": "multipart/form-data; boundary=x"})
    urllib.request.urlopen(req, timeout=60).read()
    need(sbx.files.read("/tmp/e2b/up.txt") == "uploaded", "upload_url")
    # a changed path is refused
    bad = url.replace("a.txt", "b.bin")
    try:
        urllib.request.urlopen(bad, timeout=60)
    except urllib.error.HTTPError as e:
        need(e.code == 401, e.code)
        return
    raise AssertionError("a forged signed URL was served")


@check("files.list/exists/get_info/make_dir/rename/remove")
def files_meta(sbx):
    names = sorted(e.name for e in sbx.files.list("/tmp/e2b"))
    need(names == ["a.txt", "b.bin", "c1", "c2", "gz.txt", "up.txt"], names)
    need(sbx.files.exists("/tmp/e2b/a.txt") and not sbx.files.exists("/tmp/e2b/none"), "exists")
    i = sbx.files.get_info("/tmp/e2b/a.txt")
    need(i.size == 5 and i.type.value == "file", repr(i))
    need(sbx.files.make_dir("/tmp/e2b/d") is True, "make_dir")
    need(sbx.files.make_dir("/tmp/e2b/d") is False, "make_dir again")
    sbx.files.rename("/tmp/e2b/c1", "/tmp/e2b/d/c1")
    need(sbx.files.read("/tmp/e2b/d/c1") == "1", "renamed")
    sbx.files.remove("/tmp/e2b/d")
    need(not sbx.files.exists("/tmp/e2b/d"), "removed")
    try:
        sbx.files.read("/tmp/e2b/none")
    except e2b.FileNotFoundException:
        return
    raise AssertionError("no FileNotFoundException")


@check("files.watch_dir")
def files_watch(sbx):
    h = sbx.files.watch_dir("/tmp/e2b", recursive=True)
    sbx.files.write("/tmp/e2b/w.txt", "x")
    deadline = time.monotonic() + 60
    events = []
    while time.monotonic() < deadline and not any(e.name == "w.txt" for e in events):
        events += h.get_new_events()
        time.sleep(0.2)
    h.stop()
    need(any(e.name == "w.txt" and e.type.name in ("CREATE", "WRITE") for e in events), events)


@check("pty.create + send_stdin + resize")
def pty(sbx):
    from e2b import PtySize
    h = sbx.pty.create(PtySize(rows=24, cols=80))
    sbx.pty.resize(h.pid, PtySize(rows=30, cols=100))
    sbx.pty.send_stdin(h.pid, b"stty size; exit\n")
    out = []
    try:
        h.wait(on_pty=lambda d: out.append(bytes(d)))
    except e2b.CommandExitException:
        pass
    text = b"".join(out).decode(errors="replace")
    need("30 100" in text, text)


@check("set_timeout + get_info")
def timeout(sbx):
    sbx.set_timeout(900)
    info = sbx.get_info()
    need(info.sandbox_id == sbx.sandbox_id and info.state.value == "running", repr(info))


@check("get_metrics")
def metrics(sbx):
    need(isinstance(sbx.get_metrics(), list), "metrics")


@check("Sandbox.list")
def listing(sbx):
    from e2b import SandboxQuery
    p = Sandbox.list(query=SandboxQuery(metadata={"run": RUN}))
    ids = [s.sandbox_id for s in p.next_items()]
    need(sbx.sandbox_id in ids, ids)


@check("pause + connect")
def pause_connect(sbx):
    sbx.files.write("/tmp/e2b/kept", "still here")
    need(sbx.pause() in (True, None) or True, "pause")
    info = Sandbox.get_info(sbx.sandbox_id)
    need(info.state.value == "paused", info.state)
    again = Sandbox.connect(sbx.sandbox_id)
    need(again.files.read("/tmp/e2b/kept") == "still here", "after connect")
    need(again.is_running(), "is_running")
    return again


@check("kill")
def kill(sbx):
    need(sbx.kill() is True, "kill")
    need(Sandbox.kill(sbx.sandbox_id) is False, "kill again")


@check("code_interpreter.run_code pandas")
def code_pandas(csbx):
    ex = csbx.run_code("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\ndf.describe()")
    need(ex.error is None and "mean" in (ex.text or ""), repr(ex))


@check("code_interpreter.run_code chart")
def code_chart(csbx):
    ex = csbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()")
    need(ex.error is None and any(r.png for r in ex.results), repr(ex))
    import base64
    png = base64.b64decode(next(r.png for r in ex.results if r.png))
    need(png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")


@check("code_interpreter contexts")
def code_contexts(csbx):
    ctx = csbx.create_code_context(language="python")
    csbx.run_code("x = 41", context=ctx)
    ex = csbx.run_code("x + 1", context=ctx)
    need(ex.text == "42", repr(ex))
    need(any(c.id == ctx.id for c in csbx.list_code_contexts()), "listed")
    csbx.remove_code_context(ctx)


RUN = os.environ.get("E2B_RUN", str(os.getpid()))


def main():
    which = sys.argv[1:] or ["sdk", "interpreter"]
    if "sdk" in which:
        sbx = create()
        if sbx:
            for fn in (run_echo, run_fail, run_background, run_stdin, files_rw, files_gzip,
                       files_signed, files_meta,
                       files_watch, pty, timeout, metrics, listing):
                fn(sbx)
            again = pause_connect(sbx)
            kill(again or sbx)
    if "interpreter" in which:
        import e2b_code_interpreter
        csbx = check("code_interpreter.Sandbox.create")(
            lambda: e2b_code_interpreter.Sandbox.create(timeout=600))()
        if csbx:
            code_pandas(csbx)
            code_chart(csbx)
            code_contexts(csbx)
            csbx.kill()
    print(json.dumps({"versions": {"e2b": e2b.__version__ if hasattr(e2b, "__version__") else "?"}}))
    sys.exit(0 if all(r["ok"] for r in RESULTS) else 1)


if __name__ == "__main__":
    main()
